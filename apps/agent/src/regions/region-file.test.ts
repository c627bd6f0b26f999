import assert from 'node:assert/strict';
import { execFileSync } from 'node:child_process';
import { mkdtempSync, readFileSync, rmSync, symlinkSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, describe, it } from 'node:test';

import { buildRegion } from '../testing/region-fixture.js';
import {
  formatUuid,
  parseUuid,
  readRegion,
  readRegionWithProcesses,
  RegionError,
  writeRegionLimit,
} from './region-file.js';
import {
  DEVICES_OFFSET,
  DEVICE_FIELDS,
  HEADER_FIELDS,
  REGION_SIZE,
  SLOTS_OFFSET,
} from './region-layout.js';

const GPU_A = 'GPU-5d3b7a1e-0c4f-4c8e-9f0a-1b2c3d4e5f60';
const GPU_B = 'GPU-8a9b0c1d-2e3f-4a5b-8c7d-9e0f1a2b3c4d';
const GiB = 1024 ** 3;
const dir = mkdtempSync(join(tmpdir(), 'gpushards-region-'));
after(() => rmSync(dir, { recursive: true, force: true }));

let files = 0;
function regionFile(bytes: Buffer): string {
  const path = join(dir, `region-${files++}`);
  writeFileSync(path, bytes);
  return path;
}

async function rejectsWith(
  path: string,
  code: RegionError['code'],
  message: RegExp,
): Promise<void> {
  await assert.rejects(readRegion(path), (error: unknown) => {
    assert.ok(error instanceof RegionError, String(error));
    assert.equal(error.code, code);
    assert.match(error.message, message);
    return true;
  });
}

describe('region file', () => {
  it('reads every ACTIVE device with its counters', async () => {
    const path = regionFile(
      buildRegion(
        [
          {
            uuid: GPU_A,
            limitBytes: 4 * GiB,
            usedBytes: GiB,
            contextBytes: 300,
            peakBytes: 2 * GiB,
            totalBytes: 80 * GiB,
            lastLaunchNs: 123_456_789_000n,
            pressureCount: 3n,
            pressureNs: 99n,
          },
          { uuid: GPU_B, state: 0, usedBytes: 5 },
        ],
        undefined,
        [],
        { wakeRequests: 7n, wakeRequestedNs: 42n },
      ),
    );
    const region = await readRegion(path);
    assert.equal(region.version, 1);
    assert.equal(region.wakeRequests, 7n);
    assert.equal(region.wakeRequestedNs, 42n);
    assert.deepEqual(region.devices, [
      {
        slot: 0,
        uuid: GPU_A,
        limitBytes: 4 * GiB,
        usedBytes: GiB,
        contextBytes: 300,
        peakBytes: 2 * GiB,
        totalBytes: 80 * GiB,
        lastLaunchNs: 123_456_789_000n,
        pressureCount: 3n,
        pressureNs: 99n,
      },
    ]);
  });

  it('reads the process slots in use, each with its launch second, and refuses a short file', async () => {
    const path = regionFile(
      buildRegion([{ uuid: GPU_A }], undefined, [
        { pid: 17, startTime: 555n, lastLaunchSeconds: 1234 },
        { pid: 0, lastLaunchSeconds: 99 },
        { pid: 18 },
      ]),
    );
    const region = await readRegionWithProcesses(path);
    assert.deepEqual(region.processes, [
      { pid: 17, startTime: 555n, lastLaunchSeconds: 1234 },
      { pid: 18, startTime: 0n, lastLaunchSeconds: 0 },
    ]);
    assert.deepEqual(region.ipcImporters, []);
    assert.equal(region.ipcImportersUnlisted, false);
    assert.deepEqual(
      region.devices.map((device) => device.uuid),
      [GPU_A],
      'the devices come with the slots, from the same read',
    );
    const short = regionFile(buildRegion([{ uuid: GPU_A }]).subarray(0, 4096));
    await rejectsWith(short, 'TRUNCATED', /bytes/);
  });

  it('reads which slots hold CUDA IPC imports, past the first 64-bit word too, and the unlisted flag', async () => {
    const processes = Array.from({ length: 70 }, (_, slot) => ({
      pid: 100 + slot,
      startTime: BigInt(slot),
      ipcImports: slot === 1 || slot === 65,
    }));
    const region = await readRegionWithProcesses(
      regionFile(
        buildRegion([{ uuid: GPU_A }], undefined, processes, { ipcImportersUnlisted: true }),
      ),
    );
    assert.equal(region.processes.length, 70);
    assert.deepEqual(
      region.ipcImporters.map((process) => process.pid),
      [101, 165],
    );
    assert.equal(region.ipcImportersUnlisted, true);
    // A bit whose slot is free names nobody.
    const freed = buildRegion([{ uuid: GPU_A }], undefined, [{ pid: 5, ipcImports: true }]);
    freed.writeInt32LE(0, SLOTS_OFFSET);
    assert.deepEqual((await readRegionWithProcesses(regionFile(freed))).ipcImporters, []);
  });

  it('refuses truncated, foreign, corrupt and newer files, saying which', async () => {
    const good = buildRegion([{ uuid: GPU_A }]);
    await rejectsWith(
      regionFile(good.subarray(0, 100)),
      'TRUNCATED',
      /shorter than the 256-byte header/,
    );
    await rejectsWith(
      regionFile(good.subarray(0, 4096)),
      'TRUNCATED',
      /4096 bytes, the header says/,
    );
    await rejectsWith(
      regionFile(Buffer.alloc(REGION_SIZE, 0x41)),
      'BAD_MAGIC',
      /not a GPU Shards region/,
    );
    await rejectsWith(
      regionFile(buildRegion([], 2)),
      'UNSUPPORTED_VERSION',
      /version 2, this agent reads version 1/,
    );
    const flipped = Buffer.from(good);
    flipped.writeUInt32LE(7, HEADER_FIELDS.max_devices.offset);
    await rejectsWith(regionFile(flipped), 'CORRUPT', /checksum/);
    const crowded = Buffer.from(good);
    crowded.writeUInt32LE(99, HEADER_FIELDS.device_count.offset);
    await rejectsWith(regionFile(crowded), 'CORRUPT', /device_count 99/);
    await rejectsWith(join(dir, 'absent'), 'MISSING', /does not exist/);
  });

  it('refuses symbolic links and special files a container could plant', async () => {
    const target = regionFile(buildRegion([{ uuid: GPU_A }]));
    const link = join(dir, 'link');
    symlinkSync(target, link);
    await rejectsWith(link, 'NOT_A_FILE', /symbolic link/);
    await assert.rejects(writeRegionLimit(link, GPU_A, 1), /symbolic link/);
    const fifo = join(dir, 'fifo');
    execFileSync('mkfifo', [fifo]);
    await rejectsWith(fifo, 'NOT_A_FILE', /not a regular file/);
  });

  it('writes a new limit into the matching device and nothing else', async () => {
    const path = regionFile(
      buildRegion([
        { uuid: GPU_B, limitBytes: GiB },
        { uuid: GPU_A, limitBytes: GiB, usedBytes: 9 },
      ]),
    );
    const before = readFileSync(path);
    assert.equal(await writeRegionLimit(path, GPU_A.toUpperCase(), 3 * GiB), true);
    assert.equal(
      await writeRegionLimit(path, 'GPU-00000000-0000-0000-0000-000000000000', GiB),
      false,
    );
    const region = await readRegion(path);
    assert.deepEqual(
      region.devices.map((d) => [d.uuid, d.limitBytes, d.usedBytes]),
      [
        [GPU_B, GiB, 0],
        [GPU_A, 3 * GiB, 9],
      ],
    );
    const afterWrite = readFileSync(path);
    const limitAt = DEVICES_OFFSET + 128 + DEVICE_FIELDS.limit_bytes.offset;
    assert.deepEqual(afterWrite.subarray(0, limitAt), before.subarray(0, limitAt));
    assert.deepEqual(afterWrite.subarray(limitAt + 8), before.subarray(limitAt + 8));
    await assert.rejects(writeRegionLimit(path, GPU_A, -1), RangeError);
  });

  it('prints UUIDs as NVML does and reads them back', () => {
    assert.equal(formatUuid(parseUuid(GPU_A)), GPU_A);
    assert.throws(() => parseUuid('MIG-1234'), /not a GPU UUID/);
  });
});
