import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { heartbeat } from '../testing/fleet-fixtures.js';
import { HeartbeatRows, NOT_REPORTED } from './heartbeat-rows.js';

const SHARD = '00000000-0000-4000-8000-0000000000a1';
const t0 = new Date('2030-01-01T00:00:00Z');
const t1 = new Date('2030-01-01T00:00:10Z');

describe('HeartbeatRows', () => {
  it("two heartbeats of one host in a batch: each field as the later one reports it, the earlier one's where the later is silent; a sample for each", () => {
    const rows = HeartbeatRows.of(
      [
        {
          hostId: 'h1',
          heartbeat: {
            ...heartbeat(
              'h1',
              t0,
              [
                {
                  shardId: SHARD,
                  usedBytesPerGpu: [{ gpuUuid: 'GPU-a', usedBytes: 10 }],
                  realBytesPerGpu: [{ gpuUuid: 'GPU-a', realBytes: 11 }],
                  activityPerGpu: [{ gpuUuid: 'GPU-a', busyRatio: 0.5, lastKernelSeconds: 1.5 }],
                },
              ],
              [{ uuid: 'GPU-a', usedBytes: 100 }],
            ),
            unattributedBytesPerGpu: [{ gpuUuid: 'GPU-a', bytes: 7 }],
          },
        },
        { hostId: 'h2', heartbeat: heartbeat('h2', t0, [], [{ uuid: 'GPU-b', usedBytes: 5 }]) },
        {
          hostId: 'h1',
          heartbeat: heartbeat(
            'h1',
            t1,
            [{ shardId: SHARD, usedBytesPerGpu: [{ gpuUuid: 'GPU-a', usedBytes: 20 }] }],
            [{ uuid: 'GPU-a', usedBytes: 200 }],
          ),
        },
        // Not a host of the batch's write (unknown, or taken apart): left out.
        { hostId: 'h3', heartbeat: heartbeat('h3', t0, [], [{ uuid: 'GPU-c', usedBytes: 1 }]) },
      ],
      new Set(['h1', 'h2']),
    );
    assert.deepEqual(
      [rows.gpuHostIds, rows.gpuUuids, rows.gpuUsed, rows.gpuUnattributed],
      [
        ['h1', 'h2'],
        ['GPU-a', 'GPU-b'],
        [200n, 5n],
        [7n, BigInt(NOT_REPORTED)],
      ],
    );
    assert.deepEqual(
      [
        rows.readingShardIds,
        rows.readingUsed,
        rows.readingReal,
        rows.readingBusy,
        rows.readingLastKernelMs,
      ],
      [[SHARD], [20n], [11n], [0.5], [BigInt(t0.getTime() - 1500)]],
    );
    assert.deepEqual(
      rows.sampleAt.map((at, i) => [rows.sampleHostIds[i], at.getTime(), rows.sampleUsed[i]]),
      [
        ['h1', t0.getTime(), 10n],
        ['h1', t1.getTime(), 20n],
      ],
    );
  });

  it('a shard id that is no UUID is left out; a heartbeat that reports memory of no shard counts a GPU it does not list there as 0', () => {
    const rows = HeartbeatRows.of(
      [
        {
          hostId: 'h1',
          heartbeat: {
            ...heartbeat(
              'h1',
              t0,
              [{ shardId: 'not-a-uuid', usedBytesPerGpu: [{ gpuUuid: 'GPU-a', usedBytes: 1 }] }],
              [
                { uuid: 'GPU-a', usedBytes: 1 },
                { uuid: 'GPU-b', usedBytes: 2 },
              ],
            ),
            unattributedBytesPerGpu: [{ gpuUuid: 'GPU-b', bytes: 3 }],
          },
        },
      ],
      new Set(['h1']),
    );
    assert.deepEqual(rows.gpuUnattributed, [0n, 3n]);
    assert.deepEqual([rows.readingShardIds, rows.sampleShardIds], [[], []]);
  });
});
