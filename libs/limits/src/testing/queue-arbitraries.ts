/**
 * fast-check generators of small queue scenarios for the queue tests: a fleet with shards
 * already held (placed by place() itself, so reservations are consistent), teams with
 * guarantees and limits, and pending shards of every class.
 */
import fc from 'fast-check';
import { bytes, GiB, MiB } from '../sizes.js';
import { type Gpu, gpuUuid, type Host, hostId, type HostState } from '../inventory.js';
import { place, type Placed, type PlacementOptions, type PlacementRequest } from '../placement.js';
import { RoomIndex } from '../room-index.js';
import type { HeldShard, PendingShard, QueueTeam, SuspendedShard } from '../queue/model.js';
import { DEFAULT_PRIORITY_CLASSES } from '../queue/priority.js';

export const H100 = 'NVIDIA H100 80GB HBM3';
export const A100 = 'NVIDIA A100-SXM4-40GB';

export interface Scenario {
  readonly fleet: Host[];
  readonly held: HeldShard[];
  readonly pending: PendingShard[];
  readonly teams: QueueTeam[];
  readonly options: PlacementOptions;
  readonly now: number;
}

export const TEAM_IDS = ['team-a', 'team-b', 'team-c'];

const teamArb = fc.record({
  guaranteeGiB: fc.constantFrom(0, 20, 40, 80, 160, 320),
  term: fc.constantFrom(undefined, undefined, 'h100', 'a100'),
  maxGiB: fc.constantFrom(undefined, undefined, undefined, 40, 120, 400),
  maxShards: fc.constantFrom(undefined, undefined, undefined, 1, 3, 6),
  usage: fc.constantFrom(0, 1, 10, 100),
});

const shardSpecArb = fc.record({
  team: fc.integer({ min: 0, max: TEAM_IDS.length - 1 }),
  gib: fc.constantFrom(4, 10, 20, 30, 39, 60, 79),
  gpuCount: fc.constantFrom(1, 1, 1, 2),
  cls: fc.constantFrom(0, 1, 1, 2, 2, 2),
  model: fc.constantFrom(undefined, undefined, 'h100', 'a100'),
  at: fc.integer({ min: 0, max: 50 }),
  expires: fc.constantFrom(undefined, undefined, undefined, undefined, 900, 1100),
  inFlight: fc.boolean(),
});

const hostArb = fc.record({
  state: fc.constantFrom<HostState>('ONLINE', 'ONLINE', 'ONLINE', 'CORDONED'),
  model: fc.constantFrom(H100, A100),
  gpus: fc.integer({ min: 1, max: 4 }),
});

function requestOf(spec: {
  gib: number;
  gpuCount: number;
  model: string | undefined;
}): PlacementRequest {
  return {
    bytesPerGpu: bytes(spec.gib * GiB),
    gpuCount: spec.gpuCount,
    ...(spec.model === undefined ? {} : { gpuModel: { include: [spec.model] } }),
  };
}

export const scenarioArb: fc.Arbitrary<Scenario> = fc
  .record({
    hosts: fc.array(hostArb, { minLength: 1, maxLength: 3 }),
    teams: fc.array(teamArb, { minLength: TEAM_IDS.length, maxLength: TEAM_IDS.length }),
    held: fc.array(shardSpecArb, { maxLength: 14 }),
    pending: fc.array(shardSpecArb, { maxLength: 10 }),
    overheadMiB: fc.constantFrom(0, 512),
  })
  .map(({ hosts, teams, held, pending, overheadMiB }) => {
    const options: PlacementOptions = { defaultOverheadBytes: bytes(overheadMiB * MiB) };
    const fleet: Host[] = hosts.map((spec, i) => ({
      id: hostId(`host-${i}`),
      name: `host-${i}`,
      state: spec.state,
      labels: {},
      gpus: Array.from({ length: spec.gpus }, (_, index) => ({
        uuid: gpuUuid(`GPU-${i}-${index}`),
        index,
        model: spec.model,
        totalBytes: bytes((spec.model === H100 ? 80 : 40) * GiB),
        reservedBytes: bytes(0),
      })),
    }));
    const queueTeams: QueueTeam[] = teams.map((t, i) => ({
      id: TEAM_IDS[i]!,
      guarantee: {
        bytes: bytes(t.guaranteeGiB * GiB),
        ...(t.term === undefined ? {} : { gpuModel: t.term }),
      },
      ...(t.maxGiB === undefined ? {} : { maxTotalBytes: bytes(t.maxGiB * GiB) }),
      ...(t.maxShards === undefined ? {} : { maxShards: t.maxShards }),
      decayedGiBHours: t.usage,
    }));
    // Held shards are placed one by one on an all-ONLINE copy (a cordoned host keeps its shards).
    const heldShards: HeldShard[] = [];
    held.forEach((spec, n) => {
      const request = requestOf(spec);
      const online = fleet.map((h) => ({ ...h, state: 'ONLINE' as const }));
      const result = place(request, online, options);
      if (result.kind !== 'placed') return;
      const host = fleet.find((h) => h.id === result.hostId)!;
      const gpus = host.gpus as Gpu[];
      gpus.forEach((gpu, k) => {
        if (result.gpuUuids.includes(gpu.uuid)) {
          gpus[k] = {
            ...gpu,
            reservedBytes: bytes(gpu.reservedBytes + result.reservedBytesPerGpu),
          };
        }
      });
      const cls = DEFAULT_PRIORITY_CLASSES[spec.cls]!;
      heldShards.push({
        id: `held-${n}`,
        teamId: TEAM_IDS[spec.team]!,
        hostId: result.hostId,
        gpuUuids: result.gpuUuids,
        reservedBytesPerGpu: result.reservedBytesPerGpu,
        quotaBytes: bytes(spec.gib * GiB * spec.gpuCount),
        gpuModel: host.gpus[0]!.model,
        priorityRank: cls.rank,
        preemptible: cls.preemptible,
        placedAt: spec.at,
        leaving: spec.inFlight && n % 3 === 0,
      });
    });
    const pendingShards: PendingShard[] = pending.map((spec, n) => {
      const cls = DEFAULT_PRIORITY_CLASSES[spec.cls]!;
      return {
        id: `pend-${n}`,
        teamId: TEAM_IDS[spec.team]!,
        request: requestOf(spec),
        priorityRank: cls.rank,
        preemptible: cls.preemptible,
        arrivedAt: spec.at,
        ...(spec.expires === undefined ? {} : { expiresAt: spec.expires }),
        ...(spec.inFlight && n % 6 === 0 ? { reclaimInFlight: true } : {}),
        // A requeued victim: reclaimed for the first pending shard, or for one that is gone.
        ...(spec.inFlight && n % 3 === 1 ? { reclaimedFor: n % 2 === 0 ? 'pend-0' : 'gone' } : {}),
      };
    });
    // Leaving shards were reclaimed for one of the shards whose reclaim is in flight, if any.
    const inFlight = pendingShards.filter((p) => p.reclaimInFlight === true).map((p) => p.id);
    const linked = heldShards.map((shard, n) =>
      shard.leaving && inFlight.length > 0
        ? { ...shard, reclaimFor: inFlight[n % inFlight.length]! }
        : shard,
    );
    return {
      fleet,
      held: linked,
      pending: pendingShards,
      teams: queueTeams,
      options,
      now: 1000,
    };
  });

/** A queue scenario with elastic memory (docs/elastic.md): what the elastic admission reads. */
export interface ElasticScenario extends Scenario {
  readonly suspended: SuspendedShard[];
}

/**
 * scenarioArb with elastic memory on top: GPUs with an oversubscription ratio, hosts with a
 * budget of host RAM for suspended shards, held shards that are elastic and idle since some
 * time, and some of them SUSPENDED instead (their caps moved from reserved to suspended, so the
 * fleet stays consistent), with a resume wanted for some of those.
 */
export const elasticScenarioArb: fc.Arbitrary<ElasticScenario> = fc
  .tuple(
    scenarioArb,
    fc.array(fc.constantFrom(1, 2, 3), { minLength: 3, maxLength: 3 }),
    fc.array(fc.constantFrom(0, 80, 200, 2000), { minLength: 3, maxLength: 3 }),
    fc.array(
      fc.record({
        elastic: fc.boolean(),
        idleFor: fc.constantFrom(undefined, 0, 60, 600, 3600),
        suspended: fc.constantFrom(false, false, false, true),
        resume: fc.boolean(),
      }),
      { minLength: 14, maxLength: 14 },
    ),
  )
  .map(([s, ratios, budgetsGiB, extra]) => {
    const suspendedBytesOf = new Map<string, number>();
    const hostSuspended = new Map<string, number>();
    const held: HeldShard[] = [];
    const suspended: SuspendedShard[] = [];
    const resumes: PendingShard[] = [];
    s.held.forEach((shard, n) => {
      const e = extra[n]!;
      if (e.suspended && !shard.leaving) {
        for (const uuid of shard.gpuUuids) {
          suspendedBytesOf.set(uuid, (suspendedBytesOf.get(uuid) ?? 0) + shard.reservedBytesPerGpu);
        }
        hostSuspended.set(
          shard.hostId,
          (hostSuspended.get(shard.hostId) ?? 0) +
            shard.reservedBytesPerGpu * shard.gpuUuids.length,
        );
        const one: SuspendedShard = {
          id: shard.id,
          teamId: shard.teamId,
          hostId: shard.hostId,
          gpuUuids: shard.gpuUuids,
          reservedBytesPerGpu: shard.reservedBytesPerGpu,
          quotaBytes: shard.quotaBytes,
        };
        suspended.push(one);
        if (e.resume) {
          resumes.push({
            id: shard.id,
            teamId: shard.teamId,
            request: {
              bytesPerGpu: bytes(shard.quotaBytes / shard.gpuUuids.length),
              gpuCount: shard.gpuUuids.length,
            },
            priorityRank: shard.priorityRank,
            preemptible: shard.preemptible,
            arrivedAt: shard.placedAt + 1,
            resume: one,
          });
        }
        return;
      }
      held.push({
        ...shard,
        elastic: e.elastic,
        ...(e.idleFor === undefined ? {} : { idleSince: s.now - e.idleFor * 1000 }),
      });
    });
    const fleet: Host[] = s.fleet.map((host, i) => {
      const budget = budgetsGiB[i % budgetsGiB.length]! * GiB;
      const inHost = hostSuspended.get(host.id) ?? 0;
      return {
        ...host,
        suspendBudgetBytes: bytes(Math.max(budget, inHost)),
        suspendedBytes: bytes(inHost),
        gpus: host.gpus.map((gpu) => {
          const moved = suspendedBytesOf.get(gpu.uuid) ?? 0;
          return {
            ...gpu,
            reservedBytes: bytes(gpu.reservedBytes - moved),
            suspendedBytes: bytes(moved),
            overcommitRatio: ratios[i % ratios.length]!,
          };
        }),
      };
    });
    return { ...s, fleet, held, suspended, pending: [...s.pending, ...resumes] };
  });

/** The GPUs' reserved bytes with `shards` added (sign 1) or taken away (sign −1). */
export function withShards(
  fleet: readonly Host[],
  shards: readonly { gpuUuids: readonly string[]; reservedBytesPerGpu: number }[],
  sign: 1 | -1,
): Host[] {
  const change = new Map<string, number>();
  for (const s of shards) {
    for (const uuid of s.gpuUuids) {
      change.set(uuid, (change.get(uuid) ?? 0) + sign * s.reservedBytesPerGpu);
    }
  }
  return fleet.map((host) => ({
    ...host,
    gpus: host.gpus.map((gpu) => {
      const delta = change.get(gpu.uuid) ?? 0;
      return delta === 0
        ? gpu
        : { ...gpu, reservedBytes: bytes(Math.max(0, gpu.reservedBytes + delta)) };
    }),
  }));
}

/** The shard `placement` placed, held as the control plane's commit writes it. */
export function heldFrom(
  shard: PendingShard,
  placed: Placed,
  gpuModel: string,
  placedAt: number,
): HeldShard {
  return {
    id: shard.id,
    teamId: shard.teamId,
    hostId: placed.hostId,
    gpuUuids: placed.gpuUuids,
    reservedBytesPerGpu: placed.reservedBytesPerGpu,
    quotaBytes: bytes(shard.request.bytesPerGpu * shard.request.gpuCount),
    gpuModel,
    priorityRank: shard.priorityRank,
    preemptible: shard.preemptible,
    placedAt,
    leaving: false,
  };
}

/**
 * A fleet as the control plane's fleet cache holds it for a RoomIndex: one set of host and GPU
 * objects, changed in place as the world's fleet changes (`follow`), the index told of each
 * host that changed.
 */
export class IndexedFleet {
  readonly hosts: Host[];
  readonly index = new RoomIndex();

  constructor(fleet: readonly Host[]) {
    this.hosts = fleet.map((host) => ({ ...host, gpus: host.gpus.map((gpu) => ({ ...gpu })) }));
    this.index.reset(this.hosts);
  }

  /** Takes the world's fleet (the same hosts and GPUs, in the same order) in place. */
  follow(fleet: readonly Host[]): void {
    fleet.forEach((host, i) => {
      const own = this.hosts[i] as { -readonly [K in keyof Host]: Host[K] };
      if (own.id !== host.id) throw new Error(`host ${host.id} is not ${own.id}`);
      let changed = own.state !== host.state;
      own.state = host.state;
      const gpus = own.gpus as Gpu[];
      host.gpus.forEach((gpu, g) => {
        if (JSON.stringify(gpus[g]) === JSON.stringify(gpu)) return;
        changed = true;
        gpus[g] = { ...gpu };
      });
      if (changed) this.index.changed(host.id);
    });
  }
}
