import assert from 'node:assert/strict';
import { describe, test } from 'node:test';
import fc from 'fast-check';
import { canResume } from './placement.js';
import { bytes, GiB } from './sizes.js';
import { suspendBudgetRelief, type HostRamShard, type ReliefGpu } from './suspend-budget-relief.js';

const UUIDS = ['GPU-a', 'GPU-b', 'GPU-c'] as const;

const gpusArb: fc.Arbitrary<ReliefGpu[]> = fc.tuple(
  ...UUIDS.map((uuid) =>
    fc
      .record({
        totalGiB: fc.constantFrom(16, 40, 80),
        reservedGiB: fc.integer({ min: 0, max: 80 }),
        unownedGiB: fc.integer({ min: 0, max: 8 }),
        missing: fc.integer({ min: 0, max: 9 }).map((n) => n === 0),
      })
      .map((g): ReliefGpu => ({
        uuid,
        totalBytes: bytes(g.totalGiB * GiB),
        reservedBytes: bytes(g.reservedGiB * GiB),
        unownedBytes: bytes(g.unownedGiB * GiB),
        ...(g.missing ? { missing: true } : {}),
      })),
  ),
);

const shardArb = (id: string): fc.Arbitrary<HostRamShard> =>
  fc
    .record({
      state: fc.constantFrom('SUSPENDING', 'SUSPENDED', 'SUSPENDED', 'RESUMING'),
      capGiB: fc.integer({ min: 1, max: 40 }),
      gpus: fc.subarray([...UUIDS], { minLength: 1, maxLength: 2 }),
      resumeWanted: fc.boolean(),
    })
    .map((s) => ({
      id,
      state: s.state as HostRamShard['state'],
      capBytesPerGpu: bytes(s.capGiB * GiB),
      gpuCount: s.gpus.length,
      gpuUuids: s.gpus,
      resumeWanted: s.resumeWanted,
    }));

const caseArb = fc.record({
  budget: fc.constantFrom(0, 10, 40, 100, 400).map((g) => g * GiB),
  shards: fc
    .integer({ min: 0, max: 6 })
    .chain((n) => fc.tuple(...Array.from({ length: n }, (_, i) => shardArb(`s${i}`)))),
  gpus: gpusArb,
});

const capsOf = (shard: HostRamShard) => shard.capBytesPerGpu * shard.gpuCount;

/** Each GPU's reserved bytes once the resumes decided have taken their caps. */
function reservedAfter(gpus: readonly ReliefGpu[], shards: readonly HostRamShard[]) {
  const reserved = new Map<string, number>(gpus.map((gpu) => [gpu.uuid, gpu.reservedBytes]));
  for (const shard of shards) {
    for (const uuid of shard.gpuUuids) {
      reserved.set(uuid, reserved.get(uuid)! + shard.capBytesPerGpu);
    }
  }
  return reserved;
}

describe('suspendBudgetRelief', () => {
  test('resumes only SUSPENDED shards whose GPUs all have room for them together, and only as many as the budget needs', () => {
    fc.assert(
      fc.property(caseArb, ({ budget, shards, gpus }) => {
        const relief = suspendBudgetRelief(budget, shards, gpus);
        const byId = new Map(shards.map((shard) => [shard.id, shard]));
        const resumed = relief.resume.map((id) => byId.get(id)!);
        const held = shards.reduce((sum, shard) => sum + capsOf(shard), 0);
        assert.equal(new Set(relief.resume).size, relief.resume.length);
        for (const shard of resumed) assert.equal(shard.state, 'SUSPENDED');
        // Every GPU's resident bound kept with all the resumes on it.
        const reserved = reservedAfter(gpus, resumed);
        for (const gpu of gpus) {
          assert.ok(
            reserved.get(gpu.uuid)! <= gpu.totalBytes - (gpu.unownedBytes ?? 0) ||
              reserved.get(gpu.uuid) === gpu.reservedBytes,
            gpu.uuid,
          );
          if (gpu.missing === true) assert.equal(reserved.get(gpu.uuid), gpu.reservedBytes);
        }
        const left = held - resumed.reduce((sum, shard) => sum + capsOf(shard), 0);
        assert.equal(relief.overBytes, Math.max(0, left - budget));
        if (held <= budget) assert.deepEqual(relief.resume, []);
        // Only as many as needed: before the last resume the host was still over.
        if (resumed.length > 0) assert.ok(left + capsOf(resumed.at(-1)!) > budget);
        // Still over: no SUSPENDED shard left could come back onto its GPUs.
        if (relief.overBytes > 0) {
          for (const shard of shards) {
            if (shard.state !== 'SUSPENDED' || relief.resume.includes(shard.id)) continue;
            const fits = shard.gpuUuids.every((uuid) => {
              const gpu = gpus.find((g) => g.uuid === uuid)!;
              return (
                gpu.missing !== true &&
                canResume(
                  { ...gpu, reservedBytes: bytes(reserved.get(uuid)!) },
                  shard.capBytesPerGpu,
                )
              );
            });
            assert.ok(!fits, `${shard.id} could have resumed`);
          }
        }
      }),
      { numRuns: 2000 },
    );
  });

  describe('examples', () => {
    const gpu = (over: Partial<ReliefGpu> = {}): ReliefGpu => ({
      uuid: 'GPU-a',
      totalBytes: bytes(80 * GiB),
      reservedBytes: bytes(0),
      ...over,
    });
    const suspended = (id: string, capGiB: number, over: Partial<HostRamShard> = {}) => ({
      id,
      state: 'SUSPENDED' as const,
      capBytesPerGpu: bytes(capGiB * GiB),
      gpuCount: 1,
      gpuUuids: ['GPU-a'],
      resumeWanted: false,
      ...over,
    });

    test('within its budget: nothing moves', () => {
      assert.deepEqual(
        suspendBudgetRelief(40 * GiB, [suspended('a', 20), suspended('b', 20)], [gpu()]),
        {
          resume: [],
          overBytes: 0,
        },
      );
    });

    test('a budget lowered to 15 GiB under 30 GiB held: a wanted resume first, then the largest, as many as needed', () => {
      const shards = [suspended('a', 5), suspended('b', 10), suspended('c', 15)];
      assert.deepEqual(suspendBudgetRelief(15 * GiB, shards, [gpu()]), {
        resume: ['c'],
        overBytes: 0,
      });
      const wanted = [
        suspended('a', 5, { resumeWanted: true }),
        suspended('b', 10),
        suspended('c', 15),
      ];
      assert.deepEqual(suspendBudgetRelief(15 * GiB, wanted, [gpu()]), {
        resume: ['a', 'c'],
        overBytes: 0,
      });
    });

    test('its GPU without room: kept, the host over its budget by what is left', () => {
      const full = [gpu({ reservedBytes: bytes(75 * GiB) })];
      assert.deepEqual(suspendBudgetRelief(5 * GiB, [suspended('a', 10)], full), {
        resume: [],
        overBytes: 5 * GiB,
      });
      // A missing GPU takes nothing back.
      assert.deepEqual(suspendBudgetRelief(0, [suspended('a', 10)], [gpu({ missing: true })]), {
        resume: [],
        overBytes: 10 * GiB,
      });
    });

    test('a SUSPENDING or RESUMING shard counts against the budget but is never the one resumed', () => {
      const shards = [
        { ...suspended('moving-out', 20), state: 'SUSPENDING' as const },
        { ...suspended('moving-in', 20), state: 'RESUMING' as const },
        suspended('asleep', 10),
      ];
      assert.deepEqual(suspendBudgetRelief(20 * GiB, shards, [gpu()]), {
        resume: ['asleep'],
        overBytes: 20 * GiB,
      });
    });
  });
});
