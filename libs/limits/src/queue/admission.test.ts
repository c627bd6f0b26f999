import { describe, test } from 'node:test';
import assert from 'node:assert/strict';
import fc from 'fast-check';
import { bytes, GiB } from '../sizes.js';
import { type Gpu, gpuUuid, type Host, hostId } from '../inventory.js';
import { capacityBytes, place, type Placed, type PlacementRequest } from '../placement.js';
import { admit, type AdmissionPlan } from './admission.js';
import { A100, H100, heldFrom, scenarioArb, type Scenario } from '../testing/queue-arbitraries.js';
import { guaranteeCovers, withinGuaranteeRequest } from './guarantees.js';
import {
  compareQueued,
  teamsById,
  type HeldShard,
  type PendingShard,
  type QueueTeam,
} from './model.js';
import { chooseVictims } from './reclaim.js';

const RUNS = 500;

function withPlacements(fleet: readonly Host[], placed: readonly Placed[]): Host[] {
  const add = new Map<string, number>();
  for (const p of placed) {
    for (const uuid of p.gpuUuids) add.set(uuid, (add.get(uuid) ?? 0) + p.reservedBytesPerGpu);
  }
  return fleet.map((host) => ({
    ...host,
    gpus: host.gpus.map((gpu) => ({
      ...gpu,
      reservedBytes: bytes(gpu.reservedBytes + (add.get(gpu.uuid) ?? 0)),
    })),
  }));
}

function coveredOf(team: QueueTeam, held: readonly HeldShard[]): number {
  return held
    .filter(
      (s) => s.teamId === team.id && !s.leaving && guaranteeCovers(team.guarantee, s.gpuModel),
    )
    .reduce((sum, s) => sum + s.quotaBytes, 0);
}

function run(s: Scenario): AdmissionPlan {
  return admit({
    fleet: s.fleet,
    held: s.held,
    pending: s.pending,
    teams: s.teams,
    now: s.now,
    options: s.options,
  });
}

function shuffled<T>(list: readonly T[], seed: number): T[] {
  const out = [...list];
  let x = seed || 1;
  for (let i = out.length - 1; i > 0; i--) {
    x = (x * 1103515245 + 12345) % 2 ** 31;
    const j = x % (i + 1);
    [out[i], out[j]] = [out[j]!, out[i]!];
  }
  return out;
}

describe('admission properties', () => {
  test('a team within its guarantee is never preempted; victims are borrowed and preemptible', () => {
    fc.assert(
      fc.property(scenarioArb, (s) => {
        const plan = run(s);
        const teams = teamsById(s.teams);
        const pendingById = new Map(s.pending.map((p) => [p.id, p]));
        const taken = new Map<string, number>();
        for (const p of plan.preemptions) {
          const victim = s.held.find((h) => h.id === p.victimId)!;
          assert.ok(victim.preemptible, 'non-preemptible shard chosen');
          assert.ok(!victim.leaving, 'leaving shard chosen again');
          assert.notEqual(victim.teamId, pendingById.get(p.forShardId)!.teamId);
          const team = teams.get(victim.teamId)!;
          if (guaranteeCovers(team.guarantee, victim.gpuModel)) {
            taken.set(team.id, (taken.get(team.id) ?? 0) + victim.quotaBytes);
          }
        }
        const modelOf = new Map(s.fleet.flatMap((h) => h.gpus).map((g) => [g.uuid, g.model]));
        for (const [teamId, bytesTaken] of taken) {
          const team = teams.get(teamId)!;
          // What the team gained in this pass on covered GPUs counts towards its guarantee too.
          const gained = plan.placements
            .filter((p) => pendingById.get(p.shardId)!.teamId === teamId)
            .filter((p) => guaranteeCovers(team.guarantee, modelOf.get(p.placed.gpuUuids[0]!)!))
            .reduce((a, p) => a + p.placed.bytesPerGpu * p.placed.gpuUuids.length, 0);
          assert.ok(
            coveredOf(team, s.held) + gained - bytesTaken >= team.guarantee.bytes,
            `${teamId} pushed below its guarantee`,
          );
        }
        assert.equal(
          new Set(plan.preemptions.map((p) => p.victimId)).size,
          plan.preemptions.length,
        );
      }),
      { numRuns: RUNS },
    );
  });

  test('no GPU goes past capacity × overcommit, and only online hosts take shards', () => {
    fc.assert(
      fc.property(scenarioArb, (s) => {
        const plan = run(s);
        const after = withPlacements(
          s.fleet,
          plan.placements.map((p) => p.placed),
        );
        for (const host of after) {
          const before = s.fleet.find((h) => h.id === host.id)!;
          host.gpus.forEach((gpu, i) => {
            if (gpu.reservedBytes === before.gpus[i]!.reservedBytes) return;
            assert.equal(host.state, 'ONLINE');
            assert.ok(gpu.reservedBytes <= capacityBytes(gpu), `${gpu.uuid} past capacity`);
          });
        }
      }),
      { numRuns: RUNS },
    );
  });

  test('every pending shard is decided once; no shard that fits is left waiting without cause', () => {
    fc.assert(
      fc.property(scenarioArb, (s) => {
        const plan = run(s);
        const teams = teamsById(s.teams);
        const ids = [
          ...plan.placements.map((p) => p.shardId),
          ...plan.waiting.map((w) => w.shardId),
          ...plan.expired,
        ].sort();
        assert.deepEqual(ids, s.pending.map((p) => p.id).sort());
        for (const id of plan.expired) {
          assert.ok(s.pending.find((p) => p.id === id)!.expiresAt! <= s.now);
        }
        const after = withPlacements(
          s.fleet,
          plan.placements.map((p) => p.placed),
        );
        const order = plan.waiting.map((w) => w.shardId);
        const byId = new Map(s.pending.map((p) => [p.id, p]));
        const placedIds = new Set(plan.placements.map((p) => p.shardId));
        const teamBytes = (teamId: string): { bytes: number; shards: number } => {
          const mine = s.held.filter((h) => h.teamId === teamId);
          const placedMine = s.pending.filter((p) => p.teamId === teamId && placedIds.has(p.id));
          return {
            bytes:
              mine.reduce((a, h) => a + h.quotaBytes, 0) +
              placedMine.reduce((a, p) => a + p.request.bytesPerGpu * p.request.gpuCount, 0),
            shards: mine.length + placedMine.length,
          };
        };
        plan.waiting.forEach((w, i) => {
          const shard = byId.get(w.shardId)!;
          const team = teams.get(shard.teamId)!;
          const request: PlacementRequest = shard.preemptible
            ? shard.request
            : (withinGuaranteeRequest(shard.request, team.guarantee.gpuModel) ?? shard.request);
          switch (w.reason.kind) {
            case 'capacity':
              assert.equal(place(request, after, s.options).kind, 'no-fit', `${w.shardId} fits`);
              break;
            case 'behind': {
              const ahead = w.reason.shardId;
              assert.ok(
                order.indexOf(ahead) >= 0 && order.indexOf(ahead) < i,
                'not behind one ahead',
              );
              break;
            }
            case 'quota': {
              const used = teamBytes(shard.teamId);
              const need = shard.request.bytesPerGpu * shard.request.gpuCount;
              assert.ok(
                (team.maxTotalBytes !== undefined && used.bytes + need > team.maxTotalBytes) ||
                  (team.maxShards !== undefined && used.shards + 1 > team.maxShards),
              );
              break;
            }
            case 'guarantee':
              assert.equal(shard.preemptible, false);
              break;
            case 'reclaimed':
              assert.equal(shard.reclaimedFor, w.reason.shardId);
              assert.ok(
                byId.has(w.reason.shardId) && !plan.expired.includes(w.reason.shardId),
                'reclaimed for a shard still in the queue',
              );
              break;
            case 'reclaiming':
              assert.ok(
                shard.reclaimInFlight === true ||
                  plan.preemptions.some((p) => p.forShardId === shard.id),
              );
              break;
          }
        });
      }),
      { numRuns: RUNS },
    );
  });

  test('backfill never stands in a spot kept for a waiting shard ahead', () => {
    fc.assert(
      fc.property(scenarioArb, (s) => {
        const plan = run(s);
        const kept = plan.waiting
          .filter((w) => w.reason.kind === 'capacity' || w.reason.kind === 'behind')
          .flatMap((w) => (w.spot === undefined ? [] : [w.spot]));
        const emptied = s.fleet.map((h) => ({
          ...h,
          gpus: h.gpus.map((g) => ({ ...g, reservedBytes: bytes(0) })),
        }));
        const shadow = withPlacements(emptied, [...plan.placements.map((p) => p.placed), ...kept]);
        for (const gpu of shadow.flatMap((h) => h.gpus)) {
          assert.ok(gpu.reservedBytes <= capacityBytes(gpu), `${gpu.uuid}: spot taken`);
        }
      }),
      { numRuns: RUNS },
    );
  });

  test('room a reclaim frees stays promised: once its victims are gone the shard fits its spot beside every placement', () => {
    fc.assert(
      fc.property(scenarioArb, (s) => {
        const plan = run(s);
        const promised = plan.waiting.filter((w) => w.reason.kind === 'reclaiming' && w.spot);
        const owners = new Set(promised.map((w) => w.shardId));
        const victims = new Set([
          ...s.held.filter((h) => h.leaving && owners.has(h.reclaimFor ?? '')).map((h) => h.id),
          ...plan.preemptions.filter((p) => owners.has(p.forShardId)).map((p) => p.victimId),
        ]);
        const freed = new Map<string, number>();
        for (const victim of s.held.filter((h) => victims.has(h.id))) {
          for (const uuid of victim.gpuUuids) {
            freed.set(uuid, (freed.get(uuid) ?? 0) + victim.reservedBytesPerGpu);
          }
        }
        const after = withPlacements(s.fleet, [
          ...plan.placements.map((p) => p.placed),
          ...promised.map((w) => w.spot!),
        ]);
        for (const gpu of after.flatMap((h) => h.gpus)) {
          const original = s.fleet.flatMap((h) => h.gpus).find((g) => g.uuid === gpu.uuid)!;
          const added = gpu.reservedBytes - original.reservedBytes;
          if (added === 0) continue;
          const reserved = gpu.reservedBytes - (freed.get(gpu.uuid) ?? 0);
          assert.ok(
            reserved <= Math.max(capacityBytes(gpu), original.reservedBytes),
            `${gpu.uuid}: ${reserved} > ${capacityBytes(gpu)} once the victims are gone`,
          );
        }
      }),
      { numRuns: RUNS },
    );
  });

  test('a requeued victim is never placed while the shard it was reclaimed for waits', () => {
    fc.assert(
      fc.property(scenarioArb, (s) => {
        const plan = run(s);
        const waiting = new Set(plan.waiting.map((w) => w.shardId));
        const byId = new Map(s.pending.map((p) => [p.id, p]));
        const placedBefore = new Set<string>();
        for (const { shardId } of plan.placements) {
          const reclaimedFor = byId.get(shardId)!.reclaimedFor;
          if (
            reclaimedFor !== undefined &&
            byId.has(reclaimedFor) &&
            !plan.expired.includes(reclaimedFor)
          ) {
            assert.ok(!waiting.has(reclaimedFor), `${shardId} placed while ${reclaimedFor} waits`);
            assert.ok(placedBefore.has(reclaimedFor), `${shardId} placed before ${reclaimedFor}`);
          }
          placedBefore.add(shardId);
        }
      }),
      { numRuns: RUNS },
    );
  });

  test('equal input gives an equal plan, whatever the order of the lists', () => {
    fc.assert(
      fc.property(scenarioArb, fc.integer({ min: 1, max: 1000 }), (s, seed) => {
        const a = run(s);
        const b = run({
          ...s,
          fleet: shuffled(s.fleet, seed),
          held: shuffled(s.held, seed + 1),
          pending: shuffled(s.pending, seed + 2),
          teams: shuffled(s.teams, seed + 3),
        });
        assert.deepEqual(b, a);
      }),
      { numRuns: RUNS },
    );
  });

  test('over many steps (admit, stop victims, end shards) no GPU passes capacity', () => {
    fc.assert(
      fc.property(scenarioArb, fc.array(fc.nat(), { minLength: 3, maxLength: 6 }), (s0, ends) => {
        let fleet = s0.fleet;
        let held = [...s0.held];
        let pending = [...s0.pending];
        let now = s0.now;
        const release = (shard: HeldShard): void => {
          fleet = fleet.map((host) => ({
            ...host,
            gpus: host.gpus.map((gpu) =>
              shard.gpuUuids.includes(gpu.uuid)
                ? { ...gpu, reservedBytes: bytes(gpu.reservedBytes - shard.reservedBytesPerGpu) }
                : gpu,
            ),
          }));
        };
        for (const end of ends) {
          const plan = admit({ fleet, held, pending, teams: s0.teams, now, options: s0.options });
          for (const p of plan.preemptions) {
            const victim = held.find((h) => h.id === p.victimId)!;
            release(victim);
            held = held.filter((h) => h.id !== victim.id);
          }
          fleet = withPlacements(
            fleet,
            plan.placements.map((p) => p.placed),
          );
          for (const p of plan.placements) {
            const shard = pending.find((q) => q.id === p.shardId)!;
            const gpu = fleet.flatMap((h) => h.gpus).find((g) => g.uuid === p.placed.gpuUuids[0])!;
            held.push(heldFrom(shard, p.placed, gpu.model, now));
          }
          const gone = new Set([...plan.expired, ...plan.placements.map((p) => p.shardId)]);
          pending = pending
            .filter((p) => !gone.has(p.id))
            .map((p) => ({ ...p, reclaimInFlight: false }));
          for (const gpu of fleet.flatMap((h) => h.gpus)) {
            assert.ok(gpu.reservedBytes >= 0);
            const original = s0.fleet.flatMap((h) => h.gpus).find((g) => g.uuid === gpu.uuid)!;
            assert.ok(
              gpu.reservedBytes <= Math.max(capacityBytes(gpu), original.reservedBytes),
              `${gpu.uuid} past capacity`,
            );
          }
          if (held.length > 0) {
            const ended = held[end % held.length]!;
            release(ended);
            held = held.filter((h) => h.id !== ended.id);
          }
          now += 50;
        }
      }),
      { numRuns: 150 },
    );
  });
});

describe('reclaim', () => {
  test('frees at least what the waiting shard needs, or preempts nothing', () => {
    fc.assert(
      fc.property(scenarioArb, fc.nat(), (s, pick) => {
        fc.pre(s.pending.length > 0);
        const ask = s.pending[pick % s.pending.length]!;
        const teams = teamsById(s.teams);
        const team = teams.get(ask.teamId)!;
        const covered = new Map(s.teams.map((t) => [t.id, coveredOf(t, s.held)]));
        const result = chooseVictims(
          { request: ask.request, teamId: ask.teamId, guarantee: team.guarantee },
          { fleet: s.fleet, held: s.held, teams, coveredBytes: covered, options: s.options },
        );
        if (result.kind === 'none') return;
        assert.ok(result.victims.length > 0);
        const host = s.fleet.find((h) => h.id === result.hostId)!;
        const freed = host.gpus
          .filter((gpu) => guaranteeCovers(team.guarantee, gpu.model))
          .map((gpu) => ({
            ...gpu,
            reservedBytes: bytes(
              gpu.reservedBytes -
                result.victims
                  .filter((v) => v.gpuUuids.includes(gpu.uuid))
                  .reduce((a, v) => a + v.reservedBytesPerGpu, 0),
            ),
          }));
        const placed = place(ask.request, [{ ...host, gpus: freed }], s.options);
        assert.equal(placed.kind, 'placed');
        for (const v of result.victims) assert.equal(v.hostId, result.hostId);
      }),
      { numRuns: RUNS },
    );
  });
});

// ---- worked examples -------------------------------------------------------------------------

function gpu(hostName: string, index: number, model = H100, reservedGiB = 0): Gpu {
  return {
    uuid: gpuUuid(`GPU-${hostName}-${index}`),
    index,
    model,
    totalBytes: bytes((model === H100 ? 80 : 40) * GiB),
    reservedBytes: bytes(reservedGiB * GiB),
  };
}

function host(name: string, gpus: Gpu[]): Host {
  return { id: hostId(name), name, state: 'ONLINE', labels: {}, gpus };
}

function team(id: string, guaranteeGiB: number, usage = 0): QueueTeam {
  return { id, guarantee: { bytes: bytes(guaranteeGiB * GiB) }, decayedGiBHours: usage };
}

function pending(
  id: string,
  teamId: string,
  gib: number,
  extra: Partial<PendingShard> = {},
): PendingShard {
  return {
    id,
    teamId,
    request: { bytesPerGpu: bytes(gib * GiB), gpuCount: 1 },
    priorityRank: 200,
    preemptible: true,
    arrivedAt: 0,
    ...extra,
  };
}

function heldOn(
  id: string,
  teamId: string,
  h: string,
  index: number,
  gib: number,
  extra: Partial<HeldShard> = {},
): HeldShard {
  return {
    id,
    teamId,
    hostId: hostId(h),
    gpuUuids: [gpuUuid(`GPU-${h}-${index}`)],
    reservedBytesPerGpu: bytes(gib * GiB),
    quotaBytes: bytes(gib * GiB),
    gpuModel: H100,
    priorityRank: 200,
    preemptible: true,
    placedAt: 0,
    leaving: false,
    ...extra,
  };
}

const NO_OVERHEAD = { defaultOverheadBytes: bytes(0) };

describe('admission examples', () => {
  test('order: priority class, then fair share relative to guarantee, then arrival', () => {
    const teams = teamsById([team('a', 100, 50), team('b', 10, 50), team('c', 0, 0)]);
    const list = [
      pending('late-a', 'a', 1, { arrivedAt: 5 }),
      pending('early-a', 'a', 1, { arrivedAt: 1 }),
      pending('b', 'b', 1),
      pending('c', 'c', 1),
      pending('urgent-b', 'b', 1, { priorityRank: 300 }),
    ];
    const sorted = [...list].sort((x, y) => compareQueued(x, y, teams)).map((p) => p.id);
    // c used nothing (ratio 0); a used 0.5 GiB-h per guaranteed GiB; b used 5.
    assert.deepEqual(sorted, ['urgent-b', 'c', 'early-a', 'late-a', 'b']);
  });

  test('backfill: a small shard goes past a blocked head only outside the head’s spot', () => {
    const fleet = [
      host('h1', [gpu('h1', 0, H100, 50)]), // the head's spot: 50 held, head needs 80
      host('h2', [gpu('h2', 0, H100, 70)]),
    ];
    const held = [heldOn('x', 'a', 'h1', 0, 50), heldOn('y', 'a', 'h2', 0, 70)];
    const plan = admit({
      fleet,
      held,
      pending: [
        pending('head', 'b', 80, { arrivedAt: 0 }),
        pending('small', 'b', 20, { arrivedAt: 1 }),
        pending('tiny', 'b', 10, { arrivedAt: 2 }),
      ],
      teams: [team('a', 0), team('b', 0)],
      now: 0,
      options: NO_OVERHEAD,
    });
    // tiny fits h2 (70 + 10 ≤ 80); small fits only h1, which is the head's spot.
    assert.deepEqual(
      plan.placements.map((p) => [p.shardId, p.placed.hostId]),
      [['tiny', 'h2']],
    );
    assert.deepEqual(
      plan.waiting.map((w, i) => [w.shardId, i + 1, w.reason]),
      [
        ['head', 1, { kind: 'capacity' }],
        ['small', 2, { kind: 'behind', shardId: 'head' }],
      ],
    );
    assert.equal(plan.waiting[0]!.spot?.hostId, 'h1');
  });

  test('reclaim: team b within its guarantee stops a’s youngest lowest-priority borrowed shards', () => {
    const fleet = [host('h1', [gpu('h1', 0, H100, 80), gpu('h1', 1, H100, 80)])];
    const held = [
      heldOn('a-old', 'a', 'h1', 0, 80, { placedAt: 1 }),
      heldOn('a-young', 'a', 'h1', 1, 40, { placedAt: 9 }),
      heldOn('a-young-build', 'a', 'h1', 1, 40, { placedAt: 10, priorityRank: 200 }),
    ];
    const lowered = held.map((h) => (h.id === 'a-young' ? { ...h, priorityRank: 100 } : h));
    const plan = admit({
      fleet,
      held: lowered,
      pending: [pending('b1', 'b', 40)],
      teams: [team('a', 80), team('b', 80)],
      now: 0,
      options: NO_OVERHEAD,
    });
    assert.deepEqual(plan.placements, []);
    assert.deepEqual(
      plan.preemptions.map((p) => p.victimId),
      ['a-young'],
    );
    assert.deepEqual(plan.waiting[0]!.reason, { kind: 'reclaiming', victimIds: ['a-young'] });
  });

  test('while its victims stop, the room the first freed is kept for the shard: no victim takes it back', () => {
    // GPU0 full with a's older shards; on GPU1 a's build (60) and t1a (10, stopping for b1);
    // t1b, reclaimed with it, already stopped and waits again (training), 10 free.
    const fleet = [host('h1', [gpu('h1', 0, H100, 80), gpu('h1', 1, H100, 70)])];
    const held = [
      heldOn('build-0', 'a', 'h1', 0, 60),
      heldOn('t0a', 'a', 'h1', 0, 10, { priorityRank: 100 }),
      heldOn('t0b', 'a', 'h1', 0, 10, { priorityRank: 100 }),
      heldOn('build-1', 'a', 'h1', 1, 60),
      heldOn('t1a', 'a', 'h1', 1, 10, { priorityRank: 100, leaving: true, reclaimFor: 'b1' }),
    ];
    const plan = admit({
      fleet,
      held,
      pending: [
        pending('b1', 'b', 20, { reclaimInFlight: true }),
        pending('t1b', 'a', 10, { priorityRank: 100, arrivedAt: 5 }),
      ],
      teams: [team('a', 0), team('b', 24)],
      now: 0,
      options: NO_OVERHEAD,
    });
    assert.deepEqual(plan.placements, [], 't1b fits GPU1 now, but that room is b1’s');
    assert.deepEqual(plan.preemptions, []);
    assert.deepEqual(
      plan.waiting.map((w) => [w.shardId, w.reason.kind]),
      [
        ['b1', 'reclaiming'],
        ['t1b', 'behind'],
      ],
    );
    assert.deepEqual(plan.waiting[0]!.spot?.gpuUuids, [gpuUuid('GPU-h1-1')]);
  });

  test('a victim of a higher class than the shard it was reclaimed for waits until that one is placed', () => {
    // b1 (training, within b's guarantee) reclaimed a's build shard, which waits again: it
    // comes first in the queue order and fits the room it left, which is b1's.
    const fleet = [host('h1', [gpu('h1', 0, H100, 60)])];
    const plan = admit({
      fleet,
      held: [heldOn('a-other', 'a', 'h1', 0, 60)],
      pending: [
        pending('b1', 'b', 20, { priorityRank: 100, arrivedAt: 1 }),
        pending('a-build', 'a', 20, { reclaimedFor: 'b1' }),
      ],
      teams: [team('a', 0), team('b', 20)],
      now: 0,
      options: NO_OVERHEAD,
    });
    assert.deepEqual(
      plan.placements.map((p) => p.shardId),
      ['b1'],
    );
    const next = admit({
      fleet: [host('h1', [gpu('h1', 0, H100, 60)])],
      held: [heldOn('a-other', 'a', 'h1', 0, 60)],
      pending: [pending('a-build', 'a', 20, { reclaimedFor: 'b1' })],
      teams: [team('a', 0), team('b', 20)],
      now: 0,
      options: NO_OVERHEAD,
    });
    assert.deepEqual(
      next.placements.map((p) => p.shardId),
      ['a-build'],
      'once b1 is placed (no longer pending), it goes',
    );
  });

  test('no reclaim for a team beyond its guarantee; no victim below the owner’s guarantee', () => {
    const fleet = [host('h1', [gpu('h1', 0, H100, 80)])];
    const held = [heldOn('a1', 'a', 'h1', 0, 80)];
    const beyond = admit({
      fleet,
      held,
      pending: [pending('b1', 'b', 40)],
      teams: [team('a', 0), team('b', 20)],
      now: 0,
      options: NO_OVERHEAD,
    });
    assert.deepEqual(beyond.preemptions, []);
    const guarded = admit({
      fleet,
      held,
      pending: [pending('b1', 'b', 40)],
      teams: [team('a', 80), team('b', 40)],
      now: 0,
      options: NO_OVERHEAD,
    });
    assert.deepEqual(guarded.preemptions, []);
  });

  test('a non-preemptible shard waits beyond its guarantee; expired shards are reported', () => {
    const fleet = [host('h1', [gpu('h1', 0, A100, 0)])];
    const plan = admit({
      fleet,
      held: [],
      pending: [
        pending('inf', 'a', 30, { preemptible: false, priorityRank: 300 }),
        pending('old', 'a', 1, { expiresAt: 5 }),
      ],
      teams: [team('a', 20)],
      now: 10,
      options: NO_OVERHEAD,
    });
    assert.deepEqual(plan.expired, ['old']);
    assert.equal(plan.waiting[0]!.reason.kind, 'guarantee');
  });
});
