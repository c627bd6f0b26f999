import assert from 'node:assert/strict';
import { execFileSync } from 'node:child_process';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, describe, it } from 'node:test';

import { CONTAINER_PATHS } from '../containers/container-spec.js';
import { REPO_ROOT } from '../testing/paths.js';
import {
  LIMITS_CHECKSUM_BYTES,
  LIMITS_DEVICES_OFFSET,
  LIMITS_DEVICE_FIELDS,
  LIMITS_DEVICE_SIZE,
  LIMITS_HEADER_FIELDS,
  LIMITS_HEADER_SIZE,
  LIMITS_MAGIC,
  LIMITS_MAX_DEVICES,
  LIMITS_SIZE,
  LIMITS_VERSION,
} from './limits-layout.js';

interface StructLayout {
  size: number;
  offset: number;
  count?: number;
  fields: Record<string, { offset: number; size: number }>;
}

interface LimitsLayout {
  path: string;
  magic: string;
  version: number;
  byteOrder: string;
  maxDevices: number;
  checksum: { algorithm: string; coversBytes: number };
  totalSize: number;
  structs: { header: StructLayout; device: StructLayout };
}

const work = mkdtempSync(join(tmpdir(), 'gpushards-limits-layout-'));
after(() => rmSync(work, { recursive: true, force: true }));

/** `region-layout`, built from the headers libvgpu.so is compiled with, prints "limits" too. */
function nativeLayout(): LimitsLayout {
  const program = join(work, 'region-layout');
  execFileSync('cc', [
    '-std=c11',
    '-I',
    join(REPO_ROOT, 'native/vgpu/include'),
    '-o',
    program,
    join(REPO_ROOT, 'native/vgpu/tools/region_layout.c'),
  ]);
  return (JSON.parse(execFileSync(program, { encoding: 'utf8' })) as { limits: LimitsLayout })
    .limits;
}

describe('limits file layout', () => {
  it('matches region-layout, built from native/vgpu/include/gpushards_limits.h', () => {
    const layout = nativeLayout();
    assert.equal(layout.path, CONTAINER_PATHS.limits, 'the agent mounts it where libvgpu.so looks');
    assert.equal(BigInt(layout.magic), LIMITS_MAGIC);
    assert.equal(layout.version, LIMITS_VERSION);
    assert.equal(layout.byteOrder, 'little');
    assert.equal(layout.maxDevices, LIMITS_MAX_DEVICES);
    assert.deepEqual(layout.checksum, { algorithm: 'fnv1a64', coversBytes: LIMITS_CHECKSUM_BYTES });
    assert.equal(layout.totalSize, LIMITS_SIZE);
    const { header, device } = layout.structs;
    assert.equal(header.size, LIMITS_HEADER_SIZE);
    assert.equal(device.offset, LIMITS_DEVICES_OFFSET);
    assert.equal(device.size, LIMITS_DEVICE_SIZE);
    assert.equal(device.count, LIMITS_MAX_DEVICES);
    for (const [name, field] of Object.entries(LIMITS_HEADER_FIELDS)) {
      assert.deepEqual(header.fields[name], field, `header.${name}`);
    }
    for (const [name, field] of Object.entries(LIMITS_DEVICE_FIELDS)) {
      assert.deepEqual(device.fields[name], field, `device.${name}`);
    }
    // And every field region-layout prints is one the agent writes, not zeros it never chose.
    assert.deepEqual(
      Object.keys(header.fields),
      Object.keys(LIMITS_HEADER_FIELDS),
      'header fields',
    );
    assert.deepEqual(
      Object.keys(device.fields),
      Object.keys(LIMITS_DEVICE_FIELDS),
      'device fields',
    );
  });
});
