import { describe, test } from 'node:test';
import assert from 'node:assert/strict';
import fc from 'fast-check';
import { bytes, GiB } from '../sizes.js';
import { gpuUuid, type Host, hostId } from '../inventory.js';
import { promiseBytes } from '../placement.js';
import { elasticScenarioArb, type ElasticScenario } from '../testing/queue-arbitraries.js';
import { admit, type AdmissionPlan } from './admission.js';
import { promisedRoom } from './room-after-victims.js';
import { hostBytesOf, mayBeSuspended, suspendOrder } from './make-room.js';
import type { HeldShard, PendingShard, QueueTeam, SuspendedShard } from './model.js';

const RUNS = 400;

function run(s: ElasticScenario): AdmissionPlan {
  return admit({
    fleet: s.fleet,
    held: s.held,
    pending: s.pending,
    suspended: s.suspended,
    teams: s.teams,
    now: s.now,
    options: s.options,
  });
}

interface GpuBook {
  total: number;
  unowned: number;
  reserved: number;
  suspended: number;
  promise: number;
}

/** Per GPU: what is on it, what is suspended there, and its bounds. */
function books(s: ElasticScenario): Map<string, GpuBook> {
  const map = new Map<string, GpuBook>();
  for (const host of s.fleet) {
    for (const gpu of host.gpus) {
      map.set(gpu.uuid, {
        total: gpu.totalBytes,
        unowned: gpu.unownedBytes ?? 0,
        reserved: gpu.reservedBytes,
        suspended: gpu.suspendedBytes ?? 0,
        promise: promiseBytes(gpu, s.options.defaultOvercommitRatio),
      });
    }
  }
  return map;
}

describe('elastic admission properties', () => {
  test('a plan never puts a GPU past its memory, nor its caps past the ratio, nor a host past its budget, now or once its suspends are done', () => {
    fc.assert(
      fc.property(elasticScenarioArb, (s) => {
        const plan = run(s);
        const gpus = books(s);
        const before = new Map([...gpus].map(([uuid, b]) => [uuid, { ...b }]));
        for (const { placed } of [...plan.placements, ...plan.resumes]) {
          for (const uuid of placed.gpuUuids)
            gpus.get(uuid)!.reserved += placed.reservedBytesPerGpu;
        }
        for (const { placed, shardId } of plan.resumes) {
          for (const uuid of placed.gpuUuids)
            gpus.get(uuid)!.suspended -= placed.reservedBytesPerGpu;
          assert.ok(
            s.suspended.some((x) => x.id === shardId),
            `${shardId} resumed but not suspended`,
          );
        }
        const check = (when: string) => {
          for (const [uuid, b] of gpus) {
            const was = before.get(uuid)!;
            if (b.reserved > was.reserved) {
              assert.ok(b.reserved <= b.total - b.unowned, `${uuid} ${when}: past its memory`);
            }
            if (b.reserved + b.suspended > was.reserved + was.suspended) {
              assert.ok(
                b.reserved + b.suspended <= b.promise,
                `${uuid} ${when}: caps past the ratio`,
              );
            }
          }
        };
        check('now');
        const held = new Map(s.held.map((h) => [h.id, h]));
        const hostAdded = new Map<string, number>();
        for (const suspension of plan.suspensions) {
          const victim = held.get(suspension.shardId)!;
          for (const uuid of victim.gpuUuids) {
            gpus.get(uuid)!.reserved -= victim.reservedBytesPerGpu;
            gpus.get(uuid)!.suspended += victim.reservedBytesPerGpu;
          }
          hostAdded.set(victim.hostId, (hostAdded.get(victim.hostId) ?? 0) + hostBytesOf(victim));
        }
        check('once suspended');
        for (const host of s.fleet) {
          const added = hostAdded.get(host.id) ?? 0;
          if (added === 0) continue;
          assert.ok(
            (host.suspendedBytes ?? 0) + added <= (host.suspendBudgetBytes ?? 0),
            `${host.id}: past its budget for suspended shards`,
          );
        }
      }),
      { numRuns: RUNS },
    );
  });

  test('only elastic shards are suspended, never one leaving, each once; make-room takes only idle ones, a reclaim only borrowed ones', () => {
    fc.assert(
      fc.property(elasticScenarioArb, (s) => {
        const plan = run(s);
        const held = new Map(s.held.map((h) => [h.id, h]));
        const seen = new Set<string>();
        const stopped = new Set(plan.preemptions.map((p) => p.victimId));
        for (const suspension of plan.suspensions) {
          const victim = held.get(suspension.shardId);
          assert.ok(victim !== undefined, `${suspension.shardId} suspended but not held`);
          assert.equal(victim.elastic, true, `${victim.id} is not elastic`);
          assert.equal(victim.leaving, false, `${victim.id} was already leaving`);
          assert.ok(!seen.has(victim.id) && !stopped.has(victim.id), `${victim.id} chosen twice`);
          seen.add(victim.id);
          if (suspension.cause === 'make-room')
            assert.ok(mayBeSuspended(victim), `${victim.id} busy`);
          if (suspension.cause === 'reclaim')
            assert.ok(victim.preemptible, `${victim.id} not preemptible`);
        }
      }),
      { numRuns: RUNS },
    );
  });

  test('a resume comes back to exactly its own GPUs; a placed or resumed shard makes nobody suspend for it', () => {
    fc.assert(
      fc.property(elasticScenarioArb, (s) => {
        const plan = run(s);
        const resumes = new Map(
          s.pending.filter((p) => p.resume !== undefined).map((p) => [p.id, p.resume!]),
        );
        for (const { shardId, placed } of plan.resumes) {
          const own = resumes.get(shardId);
          assert.ok(own !== undefined, `${shardId} resumed without asking`);
          assert.equal(placed.hostId, own.hostId);
          assert.deepEqual([...placed.gpuUuids], [...own.gpuUuids]);
        }
        const done = new Set([
          ...plan.placements.map((p) => p.shardId),
          ...plan.resumes.map((r) => r.shardId),
        ]);
        for (const suspension of plan.suspensions) {
          assert.ok(
            !done.has(suspension.forShardId),
            `${suspension.shardId} suspended for a shard that fit`,
          );
        }
        for (const placement of plan.placements) {
          assert.ok(!resumes.has(placement.shardId), `${placement.shardId} resumed elsewhere`);
        }
      }),
      { numRuns: RUNS },
    );
  });

  test('room made by suspends stays promised: once they are suspended the shard fits its spot', () => {
    fc.assert(
      fc.property(elasticScenarioArb, (s) => {
        const plan = run(s);
        const held = new Map(s.held.map((h) => [h.id, h]));
        for (const waiting of plan.waiting) {
          if (waiting.reason.kind !== 'suspending' || waiting.reason.victimIds.length === 0)
            continue;
          const shard = s.pending.find((p) => p.id === waiting.shardId)!;
          const leaving: HeldShard[] = s.held.map((h) =>
            (waiting.reason as { victimIds: readonly string[] }).victimIds.includes(h.id)
              ? { ...h, leaving: true, suspending: true, reclaimFor: shard.id }
              : h,
          );
          for (const id of waiting.reason.victimIds) assert.ok(held.has(id));
          const spot = promisedRoom(
            shard.id,
            shard.request,
            s.fleet,
            leaving,
            s.options,
            shard.resume,
          );
          assert.ok(spot !== undefined, `${shard.id} does not fit once its victims are suspended`);
        }
      }),
      { numRuns: RUNS },
    );
  });

  test('with no host able to suspend, elastic flags change nothing', () => {
    fc.assert(
      fc.property(elasticScenarioArb, (s) => {
        const noBudget = s.fleet.map((h) => ({ ...h, suspendBudgetBytes: bytes(0) }));
        const pending = s.pending.filter((p) => p.resume === undefined);
        const withFlags = run({ ...s, fleet: noBudget, pending });
        const plain = run({
          ...s,
          fleet: noBudget,
          pending,
          held: s.held.map(({ elastic: _e, idleSince: _i, ...h }) => h),
        });
        assert.deepEqual(withFlags, plain);
        assert.equal(withFlags.suspensions.length, 0);
      }),
      { numRuns: RUNS },
    );
  });
});

// ---------------------------------------------------------------------------------------

const T = 1_000_000;
const team = (id: string, guaranteeGiB = 0): QueueTeam => ({
  id,
  guarantee: { bytes: bytes(guaranteeGiB * GiB) },
  decayedGiBHours: 0,
});

function oneHost(ratio: number, budgetGiB: number, reservedGiB = 0, suspendedGiB = 0): Host {
  return {
    id: hostId('h'),
    name: 'h',
    state: 'ONLINE',
    labels: {},
    contextOverheadBytes: bytes(0),
    suspendBudgetBytes: bytes(budgetGiB * GiB),
    suspendedBytes: bytes(suspendedGiB * GiB),
    gpus: [
      {
        uuid: gpuUuid('GPU-0'),
        index: 0,
        model: 'NVIDIA H200',
        totalBytes: bytes(32 * GiB),
        reservedBytes: bytes(reservedGiB * GiB),
        suspendedBytes: bytes(suspendedGiB * GiB),
        overcommitRatio: ratio,
      },
    ],
  };
}

function notebook(id: string, teamId: string, gib: number, idleSince?: number): HeldShard {
  return {
    id,
    teamId,
    hostId: hostId('h'),
    gpuUuids: [gpuUuid('GPU-0')],
    reservedBytesPerGpu: bytes(gib * GiB),
    quotaBytes: bytes(gib * GiB),
    gpuModel: 'NVIDIA H200',
    priorityRank: 1,
    preemptible: true,
    placedAt: 0,
    leaving: false,
    elastic: true,
    ...(idleSince === undefined ? {} : { idleSince }),
  };
}

function asks(id: string, teamId: string, gib: number): PendingShard {
  return {
    id,
    teamId,
    request: { bytesPerGpu: bytes(gib * GiB), gpuCount: 1 },
    priorityRank: 1,
    preemptible: true,
    arrivedAt: 10,
  };
}

describe('elastic admission examples', () => {
  test('a card offering 32 GiB at ratio 3 swaps idle notebooks: the longest idle goes, fair between teams', () => {
    const held = [
      notebook('a1', 'a', 8, T - 9000),
      notebook('a2', 'a', 8, T - 8000),
      notebook('b1', 'b', 8, T - 5000),
      notebook('b2', 'b', 8), // busy
    ];
    const plan = admit({
      fleet: [oneHost(3, 96, 32)],
      held,
      pending: [asks('new', 'c', 16)],
      teams: [team('a'), team('b'), team('c')],
      now: T,
    });
    // a1 (longest idle) and then b1 (b's turn), not a2: teams take turns.
    assert.deepEqual(
      plan.suspensions.map((x) => [x.shardId, x.cause, x.forShardId]),
      [
        ['a1', 'make-room', 'new'],
        ['b1', 'make-room', 'new'],
      ],
    );
    assert.deepEqual(plan.waiting[0]!.reason, { kind: 'suspending', victimIds: ['a1', 'b1'] });
    assert.deepEqual(
      suspendOrder(held.filter((h) => h.idleSince !== undefined)).map((h) => h.id),
      ['a1', 'b1', 'a2'],
    );
  });

  test('at ratio 1 suspending frees nothing to promise: the shard waits; with no budget, nothing is suspended', () => {
    const held = [notebook('a1', 'a', 16, T - 9000), notebook('a2', 'a', 16, T - 8000)];
    for (const fleet of [[oneHost(1, 96, 32)], [oneHost(3, 0, 32)]]) {
      const plan = admit({
        fleet,
        held,
        pending: [asks('new', 'c', 16)],
        teams: [team('a'), team('c')],
        now: T,
      });
      assert.deepEqual(plan.suspensions, []);
      assert.equal(plan.waiting[0]!.reason.kind, 'capacity');
    }
  });

  test('a woken notebook comes back to its GPU, suspending an idle one there for it', () => {
    const sleeping: SuspendedShard = {
      id: 'nb',
      teamId: 'a',
      hostId: hostId('h'),
      gpuUuids: [gpuUuid('GPU-0')],
      reservedBytesPerGpu: bytes(16 * GiB),
      quotaBytes: bytes(16 * GiB),
    };
    const wake: PendingShard = { ...asks('nb', 'a', 16), resume: sleeping };
    const full = admit({
      fleet: [oneHost(3, 96, 32, 16)],
      held: [notebook('idle', 'b', 16, T - 60_000), notebook('busy', 'b', 16)],
      pending: [wake],
      suspended: [sleeping],
      teams: [team('a'), team('b')],
      now: T,
    });
    assert.deepEqual(full.resumes, []);
    assert.deepEqual(
      full.suspensions.map((x) => x.shardId),
      ['idle'],
    );
    const room = admit({
      fleet: [oneHost(3, 96, 16, 16)],
      held: [notebook('busy', 'b', 16)],
      pending: [wake],
      suspended: [sleeping],
      teams: [team('a'), team('b')],
      now: T,
    });
    assert.deepEqual(
      room.resumes.map((r) => [r.shardId, r.placed.gpuUuids]),
      [['nb', ['GPU-0']]],
    );
  });

  test('a GPU whose caps fill its ratio, all suspended, still lets them come back one by one', () => {
    // Found on an H200 (RESULTS.md): 6 × 8 GiB caps on a 16 GiB offer at ratio 3, every one
    // suspended: the GPU has no free bytes by its ratio, yet a wanted resume needs only room on
    // the GPU as it is.
    const sleepers: SuspendedShard[] = ['a', 'b', 'c', 'd'].map((id) => ({
      id,
      teamId: 't',
      hostId: hostId('h'),
      gpuUuids: [gpuUuid('GPU-0')],
      reservedBytesPerGpu: bytes(24 * GiB),
      quotaBytes: bytes(24 * GiB),
    }));
    const plan = admit({
      fleet: [oneHost(3, 96, 0, 96)],
      held: [],
      pending: sleepers.map((s, i) => ({ ...asks(s.id, 't', 24), arrivedAt: i, resume: s })),
      suspended: sleepers,
      teams: [team('t')],
      now: T,
    });
    assert.deepEqual(
      plan.resumes.map((r) => r.shardId),
      ['a'],
    );
    assert.deepEqual(
      plan.waiting.map((w) => w.shardId),
      ['b', 'c', 'd'],
    );
  });

  test('a reclaim suspends an elastic victim instead of stopping it, when the ratio and the budget keep it; else stops it', () => {
    const busy = notebook('a-busy', 'a', 32);
    const ask = (ratio: number, budgetGiB: number) =>
      admit({
        fleet: [oneHost(ratio, budgetGiB, 32)],
        held: [busy],
        pending: [asks('b-job', 'b', 16)],
        teams: [team('a'), team('b', 32)],
        now: T,
      });
    const suspended = ask(2, 96);
    assert.deepEqual(
      suspended.suspensions.map((x) => [x.shardId, x.cause, x.forShardId]),
      [['a-busy', 'reclaim', 'b-job']],
    );
    assert.deepEqual(suspended.preemptions, []);
    for (const [ratio, budget] of [
      [1, 96],
      [2, 0],
    ] as const) {
      const stopped = ask(ratio, budget);
      assert.deepEqual(stopped.suspensions, [], `ratio ${ratio}, budget ${budget}`);
      assert.deepEqual(
        stopped.preemptions.map((p) => p.victimId),
        ['a-busy'],
      );
    }
  });

  test('a suspended shard still counts against its team’s quota', () => {
    const sleeping: SuspendedShard = {
      id: 'nb',
      teamId: 'a',
      hostId: hostId('h'),
      gpuUuids: [gpuUuid('GPU-0')],
      reservedBytesPerGpu: bytes(16 * GiB),
      quotaBytes: bytes(16 * GiB),
    };
    const plan = admit({
      fleet: [oneHost(3, 96, 0, 16)],
      held: [],
      pending: [asks('more', 'a', 8)],
      suspended: [sleeping],
      teams: [{ ...team('a'), maxTotalBytes: bytes(20 * GiB) }],
      now: T,
    });
    assert.equal(plan.waiting[0]!.reason.kind, 'quota');
  });
});
