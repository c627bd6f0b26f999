import { describe, test } from 'node:test';
import assert from 'node:assert/strict';
import fc from 'fast-check';
import { bytes, GiB } from '../sizes.js';
import { gpuUuid, hostId, type Host } from '../inventory.js';
import {
  elasticScenarioArb,
  heldFrom,
  IndexedFleet,
  TEAM_IDS,
  withShards,
  type ElasticScenario,
} from '../testing/queue-arbitraries.js';
import { admitWholePass, type AdmissionPlan } from './admission.js';
import { AdmissionQueue } from './admission-queue.js';
import type { HeldShard, PendingShard, QueueTeam, SuspendedShard } from './model.js';
import { DEFAULT_PRIORITY_CLASSES } from './priority.js';

const RUNS = 400;

/** What the control plane tells its queue between passes, and what changes around it. */
type QueueEvent =
  | { kind: 'pass' }
  | { kind: 'free'; pick: number }
  | { kind: 'create'; team: number; gib: number; cls: number; at: number; expires?: number }
  | { kind: 'cancel'; pick: number }
  | { kind: 'reread'; pick: number; change: 'same' | 'requeued' | 'released' | 'expiry' }
  | { kind: 'policy'; team: number; guaranteeGiB: number; maxGiB?: number; maxShards?: number }
  | { kind: 'usage'; team: number; usage: number }
  | { kind: 'time'; ms: number }
  | { kind: 'inflight'; pick: number }
  | { kind: 'host'; pick: number }
  | { kind: 'whole' };

const eventArb: fc.Arbitrary<QueueEvent> = fc.oneof(
  { weight: 4, arbitrary: fc.constant({ kind: 'pass' as const }) },
  { weight: 2, arbitrary: fc.record({ kind: fc.constant('free' as const), pick: fc.nat() }) },
  {
    weight: 3,
    arbitrary: fc.record(
      {
        kind: fc.constant('create' as const),
        team: fc.nat(TEAM_IDS.length - 1),
        gib: fc.constantFrom(4, 10, 39, 60, 79),
        cls: fc.nat(DEFAULT_PRIORITY_CLASSES.length - 1),
        at: fc.integer({ min: 0, max: 1200 }),
        expires: fc.constantFrom(1010, 1100, 1500),
      },
      { requiredKeys: ['kind', 'team', 'gib', 'cls', 'at'] },
    ),
  },
  { weight: 1, arbitrary: fc.record({ kind: fc.constant('cancel' as const), pick: fc.nat() }) },
  {
    weight: 1,
    arbitrary: fc.record({
      kind: fc.constant('reread' as const),
      pick: fc.nat(),
      change: fc.constantFrom(
        'same' as const,
        'requeued' as const,
        'released' as const,
        'expiry' as const,
      ),
    }),
  },
  {
    weight: 1,
    arbitrary: fc.record(
      {
        kind: fc.constant('policy' as const),
        team: fc.nat(TEAM_IDS.length - 1),
        guaranteeGiB: fc.constantFrom(0, 40, 160),
        maxGiB: fc.constantFrom(40, 400),
        maxShards: fc.constantFrom(1, 6),
      },
      { requiredKeys: ['kind', 'team', 'guaranteeGiB'] },
    ),
  },
  {
    weight: 1,
    arbitrary: fc.record({
      kind: fc.constant('usage' as const),
      team: fc.nat(TEAM_IDS.length - 1),
      usage: fc.constantFrom(0, 1, 10, 100, 1000),
    }),
  },
  // 0: to the next expiry, exactly.
  {
    weight: 1,
    arbitrary: fc.record({
      kind: fc.constant('time' as const),
      ms: fc.constantFrom(0, 1, 60, 300),
    }),
  },
  { weight: 1, arbitrary: fc.record({ kind: fc.constant('inflight' as const), pick: fc.nat() }) },
  { weight: 1, arbitrary: fc.record({ kind: fc.constant('host' as const), pick: fc.nat() }) },
  { weight: 1, arbitrary: fc.constant({ kind: 'whole' as const }) },
);

/** The world a run of events changes, as the reference sees it whole. */
interface World {
  fleet: Host[];
  held: HeldShard[];
  suspended: SuspendedShard[];
  /** As the queue is told of them (reclaimInFlight not set: see inFlight). */
  pending: PendingShard[];
  resumes: PendingShard[];
  inFlight: Set<string>;
  teams: QueueTeam[];
  now: number;
}

/** Hosts whose every GPU is (nearly) full: the queue meets a full fleet. */
function filledFleet(fleet: readonly Host[]): Host[] {
  return fleet.map((host) => ({
    ...host,
    gpus: host.gpus.map((gpu) => ({
      ...gpu,
      reservedBytes: bytes(Math.max(gpu.reservedBytes, gpu.totalBytes - 2 * GiB)),
    })),
  }));
}

/** A team that only waits: no guarantee, no limit. */
function plainTeam(team: QueueTeam): QueueTeam {
  return { id: team.id, guarantee: { bytes: bytes(0) }, decayedGiBHours: team.decayedGiBHours };
}

/**
 * The scenario's world. `plain`: its teams only wait (no guarantee, no limit) and so do its
 * shards (preemptible, neither requeued, reclaiming nor resuming): the case where a pass copies
 * the end of its waiting list. `plainTeams`: the teams only, its shards as generated.
 */
function worldOf(s: ElasticScenario, full: boolean, plain: boolean, plainTeams: boolean): World {
  const stored = s.pending.filter((p) => p.resume === undefined);
  return {
    fleet: full ? filledFleet(s.fleet) : s.fleet,
    held: s.held,
    suspended: s.suspended,
    pending: stored
      .map(({ reclaimInFlight: _inFlight, ...shard }) => shard)
      .filter((p) => !plain || (p.preemptible && p.reclaimedFor === undefined)),
    resumes: plain ? [] : s.pending.filter((p) => p.resume !== undefined),
    inFlight: new Set(plain ? [] : stored.filter((p) => p.reclaimInFlight).map((p) => p.id)),
    teams: plain || plainTeams ? s.teams.map(plainTeam) : s.teams,
    now: s.now,
  };
}

/**
 * Both ways: the kept queue's pass, on the fleet as a fleet cache keeps it (changed in place,
 * its RoomIndex told), and the whole pass over the same shards and the world's fleet.
 */
function bothPasses(queue: AdmissionQueue, world: World, indexed: IndexedFleet): AdmissionPlan {
  indexed.follow(world.fleet);
  const common = {
    held: world.held,
    suspended: world.suspended,
    teams: world.teams,
    now: world.now,
    options: {},
  };
  const kept = queue.admit({
    ...common,
    fleet: indexed.hosts,
    roomIndex: indexed.index,
    reclaimsInFlight: world.inFlight,
    resumes: world.resumes,
  });
  const marked = world.pending.map((shard) =>
    world.inFlight.has(shard.id) ? { ...shard, reclaimInFlight: true } : shard,
  );
  const whole = admitWholePass({
    ...common,
    fleet: world.fleet,
    pending: [...marked, ...world.resumes],
  });
  assert.deepEqual(kept, whole);
  return kept;
}

/** The plan applied as the control plane's commit applies it; the queue told what left. */
function applied(queue: AdmissionQueue, world: World, plan: AdmissionPlan): World {
  const all = [...world.pending, ...world.resumes];
  const newlyHeld: HeldShard[] = plan.placements.map((p, i) =>
    heldFrom(
      all.find((s) => s.id === p.shardId)!,
      p.placed,
      world.fleet
        .find((h) => h.id === p.placed.hostId)
        ?.gpus.find((g) => g.uuid === p.placed.gpuUuids[0])?.model ?? '',
      world.now + i,
    ),
  );
  const gone = new Set([...plan.placements.map((p) => p.shardId), ...plan.expired]);
  queue.remove(gone);
  const resumed = new Set(plan.resumes.map((r) => r.shardId));
  return {
    ...world,
    fleet: withShards(
      world.fleet,
      plan.placements.map((p) => p.placed),
      1,
    ),
    held: [...world.held, ...newlyHeld],
    pending: world.pending.filter((s) => !gone.has(s.id)),
    resumes: world.resumes.filter((s) => !resumed.has(s.id)),
  };
}

function pick<T>(list: readonly T[], n: number): T | undefined {
  return list.length === 0 ? undefined : list[n % list.length];
}

/** One event: the world changes and the queue is told as the control plane tells it. */
function step(
  queue: AdmissionQueue,
  indexed: IndexedFleet,
  world: World,
  event: QueueEvent,
  plain: boolean,
  n: number,
): World {
  switch (event.kind) {
    case 'pass':
      return applied(queue, world, bothPasses(queue, world, indexed));
    case 'free': {
      const ended = pick(
        world.held.filter((s) => !s.leaving),
        event.pick,
      );
      if (ended === undefined) return world;
      return {
        ...world,
        fleet: withShards(world.fleet, [ended], -1),
        held: world.held.filter((s) => s.id !== ended.id),
      };
    }
    case 'create': {
      const cls = plain ? DEFAULT_PRIORITY_CLASSES[1]! : DEFAULT_PRIORITY_CLASSES[event.cls]!;
      const shard: PendingShard = {
        id: `new-${n}`,
        teamId: TEAM_IDS[event.team]!,
        request: { bytesPerGpu: bytes(event.gib * GiB), gpuCount: 1 },
        priorityRank: cls.rank,
        preemptible: cls.preemptible,
        arrivedAt: event.at,
        ...(event.expires === undefined ? {} : { expiresAt: event.expires }),
      };
      queue.put([shard]);
      return { ...world, pending: [...world.pending, shard] };
    }
    case 'cancel': {
      const shard = pick(world.pending, event.pick);
      if (shard === undefined) return world;
      queue.remove([shard.id]);
      return { ...world, pending: world.pending.filter((s) => s !== shard) };
    }
    case 'reread': {
      const shard = pick(world.pending, event.pick);
      if (shard === undefined) return world;
      const { reclaimedFor: _for, expiresAt: _expires, ...bare } = shard;
      const again: PendingShard =
        event.change === 'requeued' && !plain
          ? { ...shard, reclaimedFor: pick(world.pending, event.pick + 1)!.id }
          : event.change === 'released'
            ? { ...bare, ...(shard.expiresAt === undefined ? {} : { expiresAt: shard.expiresAt }) }
            : event.change === 'expiry'
              ? shard.expiresAt === undefined
                ? { ...shard, expiresAt: world.now + 100 }
                : {
                    ...bare,
                    ...(shard.reclaimedFor === undefined
                      ? {}
                      : { reclaimedFor: shard.reclaimedFor }),
                  }
              : { ...shard };
      queue.put([again]);
      return { ...world, pending: world.pending.map((s) => (s === shard ? again : s)) };
    }
    case 'policy': {
      if (plain) return world;
      const teams = world.teams.map((team, i) =>
        i !== event.team
          ? team
          : {
              id: team.id,
              guarantee: { bytes: bytes(event.guaranteeGiB * GiB) },
              ...(event.maxGiB === undefined ? {} : { maxTotalBytes: bytes(event.maxGiB * GiB) }),
              ...(event.maxShards === undefined ? {} : { maxShards: event.maxShards }),
              decayedGiBHours: team.decayedGiBHours,
            },
      );
      return { ...world, teams };
    }
    case 'usage':
      return {
        ...world,
        teams: world.teams.map((team, i) =>
          i === event.team ? { ...team, decayedGiBHours: event.usage } : team,
        ),
      };
    case 'time': {
      if (event.ms > 0) return { ...world, now: world.now + event.ms };
      const next = Math.min(
        ...world.pending.map((p) => p.expiresAt ?? Infinity).filter((at) => at > world.now),
      );
      return Number.isFinite(next) ? { ...world, now: next } : world;
    }
    case 'inflight': {
      if (plain) return world;
      const shard = pick(world.pending, event.pick);
      if (shard === undefined) return world;
      const inFlight = new Set(world.inFlight);
      if (inFlight.has(shard.id)) inFlight.delete(shard.id);
      else inFlight.add(shard.id);
      return { ...world, inFlight };
    }
    case 'host': {
      // A host cordoned, or back ONLINE.
      const host = pick(world.fleet, event.pick);
      if (host === undefined) return world;
      const state = host.state === 'ONLINE' ? ('CORDONED' as const) : ('ONLINE' as const);
      return { ...world, fleet: world.fleet.map((h) => (h === host ? { ...h, state } : h)) };
    }
    case 'whole':
      queue.reset(world.pending);
      return world;
  }
}

describe('AdmissionQueue: the kept queue decides as the whole pass', () => {
  test('over random runs of events (entering, placed, cancelled, expiring, policies, usage, hosts cordoned)', () => {
    fc.assert(
      fc.property(
        elasticScenarioArb,
        fc.boolean(),
        fc.constantFrom('plain', 'plain teams', 'as generated'),
        fc.array(eventArb, { minLength: 1, maxLength: 30 }),
        (s, full, mode, events) => {
          const plain = mode === 'plain';
          let world = worldOf(s, full, plain, mode === 'plain teams');
          const queue = new AdmissionQueue();
          queue.reset(world.pending);
          const indexed = new IndexedFleet(world.fleet);
          events.forEach((event, n) => {
            world = step(queue, indexed, world, event, plain, n);
          });
          bothPasses(queue, world, indexed);
          assert.equal(queue.size, world.pending.length);
        },
      ),
      { numRuns: RUNS },
    );
  });

  test('a deep queue behind a full fleet: a shard that only waits keeps its entry, pass after pass', () => {
    const host = (i: number): Host => ({
      id: hostId(`h${i}`),
      name: `h${i}`,
      state: 'ONLINE',
      labels: {},
      gpus: [
        {
          uuid: gpuUuid(`GPU-${i}`),
          index: 0,
          model: 'NVIDIA H100 80GB HBM3',
          totalBytes: bytes(80 * GiB),
          reservedBytes: bytes(80 * GiB),
        },
      ],
    });
    const pending: PendingShard[] = Array.from({ length: 50 }, (_, n) => ({
      id: `p-${String(n).padStart(3, '0')}`,
      teamId: 'plain',
      request: { bytesPerGpu: bytes(40 * GiB), gpuCount: 1 },
      priorityRank: 100,
      preemptible: true,
      arrivedAt: n,
    }));
    const teams: QueueTeam[] = [
      { id: 'plain', guarantee: { bytes: bytes(0) }, decayedGiBHours: 0 },
    ];
    const queue = new AdmissionQueue();
    queue.reset(pending);
    let fleet = [host(0), host(1)];
    const first = queue.admit({ fleet, held: [], teams, now: 100 });
    assert.equal(first.placements.length, 0);
    // One GPU frees: the head is placed, the rest wait; the same entries as before, shifted.
    fleet = [
      { ...fleet[0]!, gpus: [{ ...fleet[0]!.gpus[0]!, reservedBytes: bytes(0) }] },
      fleet[1]!,
    ];
    const second = queue.admit({ fleet, held: [], teams, now: 100 });
    assert.deepEqual(
      second.placements.map((p) => p.shardId),
      ['p-000'],
    );
    assert.equal(second.waiting.length, 49);
    assert.equal(second.waiting[0], first.waiting[1]);
    assert.equal(second.waiting[48], first.waiting[49]);
    assert.deepEqual(second, admitWholePass({ fleet, held: [], pending, teams, now: 100 }));
  });

  test('a team whose fair share passes another sorts the queue again', () => {
    const shard = (id: string, teamId: string, arrivedAt: number): PendingShard => ({
      id,
      teamId,
      request: { bytesPerGpu: bytes(40 * GiB), gpuCount: 1 },
      priorityRank: 100,
      preemptible: true,
      arrivedAt,
    });
    const pending = [shard('a1', 'a', 1), shard('b1', 'b', 2), shard('a2', 'a', 3)];
    const teams = (usageA: number): QueueTeam[] => [
      { id: 'a', guarantee: { bytes: bytes(0) }, decayedGiBHours: usageA },
      { id: 'b', guarantee: { bytes: bytes(0) }, decayedGiBHours: 5 },
    ];
    const queue = new AdmissionQueue();
    queue.reset(pending);
    const ids = (plan: AdmissionPlan) => plan.waiting.map((w) => w.shardId);
    assert.deepEqual(ids(queue.admit({ fleet: [], held: [], teams: teams(1), now: 0 })), [
      'a1',
      'a2',
      'b1',
    ]);
    assert.deepEqual(ids(queue.admit({ fleet: [], held: [], teams: teams(9), now: 0 })), [
      'b1',
      'a1',
      'a2',
    ]);
    assert.deepEqual(ids(queue.admit({ fleet: [], held: [], teams: teams(5), now: 0 })), [
      'a1',
      'b1',
      'a2',
    ]);
  });
});
