import assert from 'node:assert/strict';
import { describe, test } from 'node:test';

import fc from 'fast-check';

import {
  CAP_POLICIES,
  enforcementActions,
  type CapPolicy,
  type ProcessUsage,
  type ShardCaps,
} from './enforcement.js';

const MiB = 1024 * 1024;
const GPU0 = 'GPU-00000000-0000-0000-0000-000000000000';
const GPU1 = 'GPU-11111111-1111-1111-1111-111111111111';
const GPUS = [GPU0, GPU1, 'GPU-22222222-2222-2222-2222-222222222222'];

function caps(shardId: string, policy: CapPolicy, perGpu: Record<string, number>): ShardCaps {
  return { shardId, policy, capBytes: new Map(Object.entries(perGpu)) };
}

describe('enforcementActions', () => {
  test('a shard under cap + tolerance gets nothing; its usage is summed per GPU', () => {
    const decision = enforcementActions(
      [
        { pid: 10, gpuUuid: GPU0, bytes: 300 * MiB, shardId: 'a' },
        { pid: 11, gpuUuid: GPU0, bytes: 400 * MiB, shardId: 'a' },
      ],
      [caps('a', 'kill', { [GPU0]: 600 * MiB })],
      { toleranceBytes: 100 * MiB },
    );
    assert.deepEqual(decision.violations, []);
    assert.deepEqual(decision.usage, [
      { shardId: 'a', gpuUuid: GPU0, realBytes: 700 * MiB, top: { pid: 11, bytes: 400 * MiB } },
    ]);
  });

  test('kill takes the largest holders until the GPU is back under the cap', () => {
    const decision = enforcementActions(
      [
        { pid: 1, gpuUuid: GPU0, bytes: 100 * MiB, shardId: 'a' },
        { pid: 2, gpuUuid: GPU0, bytes: 900 * MiB, shardId: 'a' },
        { pid: 3, gpuUuid: GPU0, bytes: 500 * MiB, shardId: 'a' },
        { pid: 4, gpuUuid: GPU0, bytes: 5000 * MiB, shardId: 'b' },
      ],
      [caps('a', 'kill', { [GPU0]: 1000 * MiB }), caps('b', 'kill', { [GPU0]: 8000 * MiB })],
      { toleranceBytes: 0 },
    );
    assert.equal(decision.violations.length, 1);
    const [violation] = decision.violations;
    assert.deepEqual(violation, {
      shardId: 'a',
      gpuUuid: GPU0,
      realBytes: 1500 * MiB,
      capBytes: 1000 * MiB,
      toleranceBytes: 0,
      action: 'kill',
      process: { pid: 2, bytes: 900 * MiB },
      pids: [2],
    });
  });

  test('stop lists every process of the shard; report lists none', () => {
    const samples: ProcessUsage[] = [
      { pid: 1, gpuUuid: GPU0, bytes: 100 * MiB, shardId: 'a' },
      { pid: 2, gpuUuid: GPU1, bytes: 900 * MiB, shardId: 'a' },
    ];
    const stop = enforcementActions(samples, [caps('a', 'stop', { [GPU0]: MiB, [GPU1]: MiB })], {
      toleranceBytes: 0,
    });
    assert.deepEqual(
      stop.violations.map((v) => [v.gpuUuid, v.action, v.pids]),
      [
        [GPU0, 'stop', [1, 2]],
        [GPU1, 'stop', [1, 2]],
      ],
    );
    const report = enforcementActions(samples, [caps('a', 'report', { [GPU1]: MiB })], {
      toleranceBytes: 0,
    });
    // GPU0 was not given to the shard: anything there is past a cap of 0.
    assert.deepEqual(
      report.violations.map((v) => [v.gpuUuid, v.capBytes, v.pids]),
      [
        [GPU0, 0, []],
        [GPU1, MiB, []],
      ],
    );
  });

  test('a 2-GPU shard over on GPU 1 only: only GPU 1 processes are chosen', () => {
    const decision = enforcementActions(
      [
        { pid: 1, gpuUuid: GPU0, bytes: 900 * MiB, shardId: 'a' },
        { pid: 2, gpuUuid: GPU1, bytes: 1200 * MiB, shardId: 'a' },
      ],
      [caps('a', 'kill', { [GPU0]: 1000 * MiB, [GPU1]: 1000 * MiB })],
      { toleranceBytes: 0 },
    );
    assert.deepEqual(
      decision.violations.map((v) => [v.gpuUuid, v.pids]),
      [[GPU1, [2]]],
    );
  });

  test('dying processes count as gone; cap 0 is uncapped; processes of no shard are unattributed', () => {
    const decision = enforcementActions(
      [
        { pid: 1, gpuUuid: GPU0, bytes: 2000 * MiB, shardId: 'a' },
        { pid: 2, gpuUuid: GPU0, bytes: 500 * MiB, shardId: 'a' },
        { pid: 3, gpuUuid: GPU0, bytes: 9000 * MiB, shardId: 'u' },
        { pid: 4, gpuUuid: GPU1, bytes: 700 * MiB },
        { pid: 5, gpuUuid: GPU1, bytes: 70 * MiB, shardId: 'gone' },
      ],
      [caps('a', 'kill', { [GPU0]: 1000 * MiB }), caps('u', 'kill', { [GPU0]: 0 })],
      { toleranceBytes: 0, dying: new Set([1]) },
    );
    assert.deepEqual(decision.violations, []);
    assert.deepEqual(decision.unattributed, [{ gpuUuid: GPU1, bytes: 770 * MiB, pids: [4, 5] }]);
  });

  test('refuses a tolerance that is not a whole number of bytes', () => {
    assert.throws(() => enforcementActions([], [], { toleranceBytes: -1 }), /toleranceBytes/);
    assert.throws(() => enforcementActions([], [], { toleranceBytes: 0.5 }), /toleranceBytes/);
  });
});

// ---------------------------------------------------------------------------------------
// Properties over random hosts.

const shardIds = ['s0', 's1', 's2', 's3'];
const arbitraryHost = fc
  .record({
    shards: fc.array(
      fc.record({
        policy: fc.constantFrom(...CAP_POLICIES),
        caps: fc.array(fc.integer({ min: 0, max: 4000 }), { minLength: 3, maxLength: 3 }),
        given: fc.array(fc.boolean(), { minLength: 3, maxLength: 3 }),
      }),
      { minLength: 4, maxLength: 4 },
    ),
    samples: fc.array(
      fc.record({
        pid: fc.integer({ min: 1, max: 40 }),
        gpu: fc.integer({ min: 0, max: 2 }),
        bytes: fc.integer({ min: 0, max: 3000 }),
        shard: fc.integer({ min: -1, max: 3 }),
      }),
      { maxLength: 40 },
    ),
    tolerance: fc.integer({ min: 0, max: 500 }),
    dying: fc.uniqueArray(fc.integer({ min: 1, max: 40 }), { maxLength: 5 }),
  })
  .map(({ shards, samples, tolerance, dying }) => {
    // A pid belongs to one shard (or none), as a process belongs to one cgroup.
    const owner = new Map<number, number>();
    const processUsage: ProcessUsage[] = samples.map((sample) => {
      if (!owner.has(sample.pid)) owner.set(sample.pid, sample.shard);
      const shard = owner.get(sample.pid)!;
      return {
        pid: sample.pid,
        gpuUuid: GPUS[sample.gpu]!,
        bytes: sample.bytes * MiB,
        ...(shard >= 0 ? { shardId: shardIds[shard]! } : {}),
      };
    });
    const shardCaps: ShardCaps[] = shards.map((shard, i) => ({
      shardId: shardIds[i]!,
      policy: shard.policy,
      capBytes: new Map(
        GPUS.flatMap((gpu, g) => (shard.given[g] ? [[gpu, shard.caps[g]! * MiB] as const] : [])),
      ),
    }));
    return { processUsage, shardCaps, toleranceBytes: tolerance * MiB, dying: new Set(dying) };
  });

/** Bytes per shard per GPU per pid, each pid counted once per GPU at its largest. */
function heldBy(samples: readonly ProcessUsage[], dying: ReadonlySet<number>) {
  const held = new Map<string, Map<number, number>>();
  for (const s of samples) {
    if (s.shardId === undefined || dying.has(s.pid) || s.bytes <= 0) continue;
    const key = `${s.shardId}|${s.gpuUuid}`;
    const pids = held.get(key) ?? new Map<number, number>();
    pids.set(s.pid, Math.max(pids.get(s.pid) ?? 0, s.bytes));
    held.set(key, pids);
  }
  return held;
}

describe('enforcementActions properties', () => {
  test('acts exactly on shards past cap + tolerance, with their own policy', () => {
    fc.assert(
      fc.property(arbitraryHost, ({ processUsage, shardCaps, toleranceBytes, dying }) => {
        const decision = enforcementActions(processUsage, shardCaps, { toleranceBytes, dying });
        const held = heldBy(processUsage, dying);
        for (const shard of shardCaps) {
          for (const gpu of GPUS) {
            const pids = held.get(`${shard.shardId}|${gpu}`);
            const real = pids ? [...pids.values()].reduce((a, b) => a + b, 0) : 0;
            const cap = shard.capBytes.get(gpu);
            const over = cap !== 0 && real > (cap ?? 0) + toleranceBytes;
            const found = decision.violations.find(
              (v) => v.shardId === shard.shardId && v.gpuUuid === gpu,
            );
            if (!over) assert.equal(found, undefined);
            if (over && shard.policy !== 'kill') {
              assert.ok(found, 'a shard over its cap is reported');
              assert.equal(found.action, shard.policy);
              assert.equal(found.realBytes, real);
            }
            if (found) {
              assert.equal(found.action, shard.policy);
              assert.equal(found.capBytes, cap ?? 0);
            }
          }
        }
      }),
    );
  });

  test('kill: victims are the shard own processes, largest first, and bring every GPU under its cap', () => {
    fc.assert(
      fc.property(arbitraryHost, ({ processUsage, shardCaps, toleranceBytes, dying }) => {
        const decision = enforcementActions(processUsage, shardCaps, { toleranceBytes, dying });
        const held = heldBy(processUsage, dying);
        const victimsOf = new Map<string, Set<number>>();
        for (const violation of decision.violations) {
          if (violation.action === 'report') assert.deepEqual(violation.pids, []);
          if (violation.action !== 'kill') continue;
          const pids = held.get(`${violation.shardId}|${violation.gpuUuid}`)!;
          const victims = victimsOf.get(violation.shardId) ?? new Set<number>();
          for (const pid of violation.pids) {
            // Never a neighbour's process, never one that is already dying, never twice.
            assert.ok(pids.has(pid), `pid ${pid} holds memory of the shard on that GPU`);
            assert.ok(!dying.has(pid));
            assert.ok(!victims.has(pid));
            victims.add(pid);
          }
          // Largest first: no spared process on this GPU holds more than a chosen one.
          const chosen = violation.pids.map((pid) => pids.get(pid)!);
          const spared = [...pids].filter(([pid]) => !victims.has(pid)).map(([, b]) => b);
          if (chosen.length > 0) assert.ok(Math.max(0, ...spared) <= Math.min(...chosen));
          victimsOf.set(violation.shardId, victims);
        }
        // After the kills every capped GPU of a kill shard is at or under its cap + tolerance,
        // and the other shards lost nothing.
        for (const shard of shardCaps) {
          const victims = victimsOf.get(shard.shardId) ?? new Set<number>();
          if (shard.policy !== 'kill') assert.equal(victims.size, 0);
          for (const gpu of GPUS) {
            const pids = held.get(`${shard.shardId}|${gpu}`);
            if (!pids || shard.capBytes.get(gpu) === 0) continue;
            const left = [...pids]
              .filter(([pid]) => !victims.has(pid))
              .reduce((a, [, b]) => a + b, 0);
            if (shard.policy === 'kill') {
              assert.ok(left <= (shard.capBytes.get(gpu) ?? 0) + toleranceBytes);
            }
          }
        }
      }),
    );
  });

  test('raising caps never brings action on a shard that had none', () => {
    fc.assert(
      fc.property(arbitraryHost, ({ processUsage, shardCaps, toleranceBytes }) => {
        const before = enforcementActions(processUsage, shardCaps, { toleranceBytes });
        const raised = shardCaps.map((shard) => ({
          ...shard,
          capBytes: new Map(
            [...shard.capBytes].map(([gpu, cap]) => [gpu, cap === 0 ? 0 : cap + MiB]),
          ),
        }));
        const after = enforcementActions(processUsage, raised, { toleranceBytes });
        const shardsBefore = new Set(before.violations.map((v) => v.shardId));
        for (const violation of after.violations) assert.ok(shardsBefore.has(violation.shardId));
      }),
    );
  });
});
