import assert from 'node:assert/strict';
import { mkdtempSync, readFileSync, rmSync, statSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, describe, it } from 'node:test';

import { fnv1a64 } from '../regions/region-file.js';
import {
  decodeLimits,
  encodeLimits,
  LimitsFile,
  LimitsFileError,
  writeLimitsFile,
  type ComputeTurns,
} from './limits-file.js';
import { LIMITS_SIZE } from './limits-layout.js';

const GPU0 = 'GPU-fa4e5000-0000-4000-8000-000000000000';
const GPU1 = 'GPU-fa4e5000-0000-4000-8000-000000000001';
const work = mkdtempSync(join(tmpdir(), 'gpushards-limits-'));
after(() => rmSync(work, { recursive: true, force: true }));

describe('limits file', () => {
  it('encodes the header and devices at the contract offsets', () => {
    const bytes = encodeLimits([
      { uuid: GPU0, limitBytes: 4 * 2 ** 30, contextBytes: 300 * 2 ** 20 },
      { uuid: GPU1, limitBytes: 0, contextBytes: 1, realBytes: 7, realSampledAtMs: 9 },
    ]);
    assert.equal(bytes.length, 128 + 16 * 128);
    assert.equal(LIMITS_SIZE, bytes.length);
    assert.equal(bytes.subarray(0, 8).toString('latin1'), 'GPULIMT1');
    assert.equal(bytes.readUInt32LE(8), 1);
    assert.equal(bytes.readUInt32LE(12), 128);
    assert.equal(bytes.readBigUInt64LE(16), BigInt(LIMITS_SIZE));
    assert.equal(bytes.readUInt32LE(24), 16);
    assert.equal(bytes.readUInt32LE(28), 128);
    assert.equal(bytes.readUInt32LE(32), 2);
    assert.equal(bytes.readBigUInt64LE(40), fnv1a64(bytes.subarray(0, 40)));
    const second = 128 + 128;
    assert.equal(
      bytes.subarray(second, second + 16).toString('hex'),
      GPU1.slice(4).replaceAll('-', ''),
    );
    assert.equal(bytes.readUInt32LE(second + 16), 1);
    assert.equal(bytes.readBigUInt64LE(128 + 24), 4n << 30n);
    assert.equal(bytes.readBigUInt64LE(128 + 32), 300n << 20n);
    assert.equal(bytes.readBigUInt64LE(second + 48), 7n);
    assert.equal(bytes.readBigUInt64LE(second + 56), 9n);
    // Everything past the fields is zero (reserved).
    assert.ok(bytes.subarray(second + 64, second + 128).every((b) => b === 0));
    assert.ok(bytes.subarray(3 * 128).every((b) => b === 0));
  });

  it('refuses bad input with a clear error', () => {
    assert.throws(
      () => encodeLimits([{ uuid: GPU0, limitBytes: -1, contextBytes: 0 }]),
      /limitBytes must be a whole number/,
    );
    assert.throws(
      () => encodeLimits([{ uuid: 'nope', limitBytes: 1, contextBytes: 0 }]),
      /not a GPU UUID/,
    );
    assert.throws(
      () =>
        encodeLimits([
          { uuid: GPU0, limitBytes: 1, contextBytes: 0 },
          { uuid: GPU0.toUpperCase().replace('GPU', 'GPU'), limitBytes: 1, contextBytes: 0 },
        ]),
      /listed twice/,
    );
    assert.throws(
      () =>
        encodeLimits(
          Array.from({ length: 17 }, () => ({ uuid: GPU0, limitBytes: 1, contextBytes: 0 })),
        ),
      /at most 16 GPUs/,
    );
    assert.throws(() => encodeLimits([], { shardId: 'x'.repeat(48) }), /at most 47 bytes/);
    assert.throws(() => encodeLimits([], { shardId: 'a\0b' }), /without NUL/);
    const corrupt = encodeLimits([]);
    corrupt.writeUInt32LE(3, 32);
    assert.throws(() => decodeLimits(corrupt), LimitsFileError);
  });

  it('names the shard in the header, outside the checksum, NUL-terminated', () => {
    const bytes = encodeLimits([], { shardId: 'shard-7f3a' });
    assert.equal(bytes.subarray(48, 58).toString('utf8'), 'shard-7f3a');
    assert.ok(bytes.subarray(58, 128).every((b) => b === 0));
    assert.equal(bytes.readBigUInt64LE(40), fnv1a64(bytes.subarray(0, 40)));
    assert.ok(
      encodeLimits([])
        .subarray(48, 128)
        .every((b) => b === 0),
    );
  });

  it("carries the host's compute turns in the header, outside the checksum", () => {
    // compute_turns at 96: 1 CPU, 2 GPU; 0 (unset) when the writer names none.
    assert.equal(encodeLimits([], { shardId: 'a', computeTurns: 'cpu' }).readUInt32LE(96), 1);
    assert.equal(encodeLimits([], { shardId: 'a', computeTurns: 'gpu' }).readUInt32LE(96), 2);
    assert.equal(encodeLimits([], { shardId: 'a' }).readUInt32LE(96), 0);
    const bytes = encodeLimits([{ uuid: GPU0, limitBytes: 1, contextBytes: 1 }], {
      shardId: 'a',
      computeTurns: 'gpu',
    });
    assert.equal(bytes.readBigUInt64LE(40), fnv1a64(bytes.subarray(0, 40)));
    assert.ok(
      bytes.subarray(100, 128).every((b) => b === 0),
      'resident, no pressure wait, the rest reserved',
    );
    assert.equal(decodeLimits(bytes).length, 1);
    assert.throws(
      () => encodeLimits([], { shardId: 'a', computeTurns: 'fast' as ComputeTurns }),
      /compute turns are cpu or gpu, got fast/,
    );
  });

  it('carries where the memory is and the pressure wait in the header, outside the checksum; both change in place', async () => {
    // memory_state at 100: 0 resident, 1 suspended; pressure_wait_ms at 104.
    const bytes = encodeLimits([], { memory: 'suspended', pressureWaitMs: 300 });
    assert.equal(bytes.readUInt32LE(100), 1);
    assert.equal(bytes.readUInt32LE(104), 300);
    assert.equal(bytes.readBigUInt64LE(40), fnv1a64(bytes.subarray(0, 40)));
    assert.throws(() => encodeLimits([], { pressureWaitMs: -1 }), /pressure wait/);
    assert.throws(() => encodeLimits([], { pressureWaitMs: 60_001 }), /pressure wait/);
    assert.throws(() => encodeLimits([], { pressureWaitMs: 1.5 }), /pressure wait/);
    const path = join(work, 'memory-mark');
    await writeLimitsFile(path, [{ uuid: GPU0, limitBytes: 1, contextBytes: 0 }]);
    const inode = statSync(path).ino;
    const file = await LimitsFile.open(path);
    try {
      assert.equal(await file.memory(), 'resident');
      await file.setMemory('suspended');
      assert.equal(await file.memory(), 'suspended');
      assert.equal(readFileSync(path).readUInt32LE(100), 1);
      await file.setPressureWait(250);
      assert.equal(readFileSync(path).readUInt32LE(104), 250);
      await file.setMemory('resident');
      assert.equal(readFileSync(path).readUInt32LE(100), 0);
      await assert.rejects(file.setPressureWait(60_001), RangeError);
      assert.equal(statSync(path).ino, inode, 'changed in place: the bind mount follows the inode');
      assert.equal(decodeLimits(readFileSync(path)).length, 1);
    } finally {
      await file.close();
    }
  });

  it('is written whole (0644) and then changed in place, field by field', async () => {
    const path = join(work, 'shard-1');
    await writeLimitsFile(path, [
      { uuid: GPU0, limitBytes: 1000, contextBytes: 10 },
      { uuid: GPU1, limitBytes: 2000, contextBytes: 10 },
    ]);
    assert.equal(statSync(path).mode & 0o777, 0o644);
    const inode = statSync(path).ino;
    const file = await LimitsFile.open(path);
    try {
      assert.equal(
        await file.set(GPU1.toUpperCase().replace('GPU', 'GPU'), 'limit_bytes', 3000),
        true,
      );
      assert.equal(await file.set(GPU0, 'real_bytes', 1234), true);
      assert.equal(
        await file.set('GPU-00000000-0000-0000-0000-000000000000', 'real_bytes', 1),
        false,
      );
      await assert.rejects(file.set(GPU0, 'real_bytes', -5), RangeError);
      assert.deepEqual(
        decodeLimits(readFileSync(path)).map((d) => [d.uuid, d.limitBytes, d.realBytes]),
        [
          [GPU0, 1000, 1234],
          [GPU1, 3000, 0],
        ],
      );
    } finally {
      await file.close();
    }
    // In place: a container's file bind keeps seeing the same inode.
    assert.equal(statSync(path).ino, inode);
  });
  it('carries the compute share and mode, set in place with one 8-byte write', async () => {
    const path = join(work, 'compute');
    await writeLimitsFile(path, [
      { uuid: GPU0, limitBytes: 1000, contextBytes: 10, computeSharePermille: 250 },
      { uuid: GPU1, limitBytes: 2000, contextBytes: 10 },
    ]);
    const bytes = readFileSync(path);
    assert.equal(bytes.readUInt32LE(128 + 64), 250, 'share at device offset 64');
    assert.equal(bytes.readUInt32LE(128 + 68), 0, 'mode unset');
    assert.throws(
      () =>
        encodeLimits([{ uuid: GPU0, limitBytes: 1, contextBytes: 1, computeSharePermille: 1001 }]),
      RangeError,
    );
    const file = await LimitsFile.open(path);
    try {
      assert.equal(await file.setCompute(GPU1, 600, 'capped'), true);
      assert.equal(
        await file.setCompute('GPU-00000000-0000-0000-0000-000000000000', 1, 'capped'),
        false,
      );
      await assert.rejects(file.setCompute(GPU0, -1, 'guaranteed'), RangeError);
      assert.deepEqual(
        decodeLimits(readFileSync(path)).map((d) => [d.computeSharePermille, d.computeMode]),
        [
          [250, undefined],
          [600, 'capped'],
        ],
      );
    } finally {
      await file.close();
    }
  });

  it('carries isolated mode (code 3) and the MPS thread percentage at device offset 72, which setCompute leaves', async () => {
    const path = join(work, 'isolated');
    await writeLimitsFile(path, [
      {
        uuid: GPU0,
        limitBytes: 1000,
        contextBytes: 10,
        computeSharePermille: 300,
        computeMode: 'isolated',
        mpsThreadPercent: 30,
      },
      { uuid: GPU1, limitBytes: 2000, contextBytes: 10, mpsThreadPercent: 60 },
    ]);
    const bytes = readFileSync(path);
    assert.equal(bytes.readUInt32LE(128 + 68), 3, 'isolated is compute_mode 3');
    assert.equal(bytes.readUInt32LE(128 + 72), 30, 'mps_thread_percent at device offset 72');
    assert.equal(bytes.readUInt32LE(256 + 72), 60);
    assert.throws(
      () => encodeLimits([{ uuid: GPU0, limitBytes: 1, contextBytes: 1, mpsThreadPercent: 101 }]),
      /MPS thread percentage is 0..100/,
    );
    const file = await LimitsFile.open(path);
    try {
      // A live share change rewrites share and mode only: an MPS client keeps its percentage.
      assert.equal(await file.setCompute(GPU0, 200, 'isolated'), true);
      assert.equal(await file.setCompute(GPU1, 500, 'guaranteed'), true);
      assert.deepEqual(
        decodeLimits(readFileSync(path)).map((d) => [
          d.computeSharePermille,
          d.computeMode,
          d.mpsThreadPercent,
        ]),
        [
          [200, 'isolated', 30],
          [500, 'guaranteed', 60],
        ],
      );
      assert.deepEqual(
        (await file.read()).map((d) => d.mpsThreadPercent),
        [30, 60],
      );
    } finally {
      await file.close();
    }
    const without = decodeLimits(encodeLimits([{ uuid: GPU0, limitBytes: 1, contextBytes: 1 }]));
    assert.equal('mpsThreadPercent' in without[0]!, false, 'absent on a host without MPS');
  });
});
