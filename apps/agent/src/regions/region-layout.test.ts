import assert from 'node:assert/strict';
import { execFileSync } from 'node:child_process';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, describe, it } from 'node:test';

import { REPO_ROOT } from '../testing/paths.js';
import {
  CHECKSUM_BYTES,
  DEVICES_OFFSET,
  DEVICE_FIELDS,
  DEVICE_SIZE,
  HEADER_FIELDS,
  HEADER_SIZE,
  IPC_IMPORTER_SLOTS,
  MAX_DEVICES,
  MAX_SLOTS,
  REGION_MAGIC,
  REGION_SIZE,
  REGION_VERSION,
  SLOT_FIELDS,
  SLOTS_OFFSET,
  SLOT_SIZE,
} from './region-layout.js';

interface StructLayout {
  size: number;
  offset: number;
  count?: number;
  fields: Record<string, { offset: number; size: number }>;
}

interface Layout {
  magic: string;
  version: number;
  byteOrder: string;
  maxDevices: number;
  maxSlots: number;
  ipcImporterSlots: number;
  checksum: { algorithm: string; coversBytes: number };
  totalSize: number;
  structs: { header: StructLayout; device: StructLayout; slot: StructLayout };
}

const work = mkdtempSync(join(tmpdir(), 'gpushards-layout-'));
after(() => rmSync(work, { recursive: true, force: true }));

/**
 * Builds native/vgpu/tools/region_layout.c from the one header libvgpu.so is compiled with
 * and reads its JSON, so a change on either side fails here.
 */
function nativeLayout(): Layout {
  const program = join(work, 'region-layout');
  execFileSync('cc', [
    '-std=c11',
    '-I',
    join(REPO_ROOT, 'native/vgpu/include'),
    '-o',
    program,
    join(REPO_ROOT, 'native/vgpu/tools/region_layout.c'),
  ]);
  return JSON.parse(execFileSync(program, { encoding: 'utf8' })) as Layout;
}

describe('region layout', () => {
  it('matches region-layout, built from native/vgpu/include/gpushards_region.h', () => {
    const layout = nativeLayout();
    assert.equal(BigInt(layout.magic), REGION_MAGIC);
    assert.equal(layout.version, REGION_VERSION);
    assert.equal(layout.byteOrder, 'little');
    assert.equal(layout.maxDevices, MAX_DEVICES);
    assert.equal(layout.maxSlots, MAX_SLOTS);
    assert.equal(layout.ipcImporterSlots, IPC_IMPORTER_SLOTS);
    assert.deepEqual(layout.checksum, { algorithm: 'fnv1a64', coversBytes: CHECKSUM_BYTES });
    assert.equal(layout.totalSize, REGION_SIZE);
    const { header, device, slot } = layout.structs;
    assert.equal(header.size, HEADER_SIZE);
    assert.equal(device.offset, DEVICES_OFFSET);
    assert.equal(device.size, DEVICE_SIZE);
    assert.equal(device.count, MAX_DEVICES);
    assert.equal(slot.offset, SLOTS_OFFSET);
    assert.equal(slot.size, SLOT_SIZE);
    assert.equal(slot.count, MAX_SLOTS);
    // Every field the agent reads sits where the C compiler put it.
    for (const [name, field] of Object.entries(HEADER_FIELDS)) {
      assert.deepEqual(header.fields[name], field, `header.${name}`);
    }
    for (const [name, field] of Object.entries(DEVICE_FIELDS)) {
      assert.deepEqual(device.fields[name], field, `device.${name}`);
    }
    for (const [name, field] of Object.entries(SLOT_FIELDS)) {
      assert.deepEqual(slot.fields[name], field, `slot.${name}`);
    }
  });
});
