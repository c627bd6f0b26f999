/**
 * Reclaim: which borrowed shards to stop so that a shard within its team's guarantee can run.
 *
 * Victims are shards of other teams, of a preemptible class, not already leaving, whose removal
 * keeps their team at or above its guarantee (on the GPUs the guarantee covers; shards on GPUs
 * it does not cover are all borrowed). They are taken in this order: lowest priority class
 * first, then the team furthest over its fair share, then the youngest, then the smaller id.
 *
 * Host by host, victims are added in that order until the waiting shard fits on the host's GPUs
 * that its guarantee covers, then any victim the fit does not need is given back. Among hosts
 * the one whose victims are least costly wins: lowest highest class among them, then fewest,
 * then fewest bytes, then the smaller host id. Either the answer frees enough for the shard
 * (placement itself says so) or it preempts nothing.
 */
import { bytes } from '../sizes.js';
import type { Gpu, Host } from '../inventory.js';
import { place, type Placed, type PlacementOptions, type PlacementRequest } from '../placement.js';
import { compareText } from '../placement-rules.js';
import { compareFairShare } from './fair-share.js';
import { guaranteeCovers, type Guarantee } from './guarantees.js';
import { fairShareOf, type HeldShard, type QueueTeam } from './model.js';

export interface ReclaimAsk {
  readonly request: PlacementRequest;
  readonly teamId: string;
  /** The waiting shard's team guarantee: only the GPUs it covers are looked at. */
  readonly guarantee: Guarantee;
}

export interface ReclaimContext {
  readonly fleet: readonly Host[];
  readonly held: readonly HeldShard[];
  readonly teams: ReadonlyMap<string, QueueTeam>;
  /** Per team: requested bytes on guarantee-covered GPUs held, leaving shards excluded. */
  readonly coveredBytes: ReadonlyMap<string, number>;
  readonly options?: PlacementOptions;
}

export type ReclaimResult =
  | {
      readonly kind: 'reclaim';
      readonly hostId: string;
      /** In the order they were chosen. */
      readonly victims: readonly HeldShard[];
      /** Where the waiting shard goes once the victims are gone. */
      readonly placed: Placed;
    }
  | { readonly kind: 'none' };

/** Negative when a is stopped before b. */
export function compareVictims(
  a: HeldShard,
  b: HeldShard,
  teams: ReadonlyMap<string, QueueTeam>,
): number {
  if (a.priorityRank !== b.priorityRank) return a.priorityRank - b.priorityRank;
  if (a.teamId !== b.teamId) {
    const share = compareFairShare(
      fairShareOf(teams.get(b.teamId)),
      fairShareOf(teams.get(a.teamId)),
    );
    if (share !== 0) return share;
  }
  if (a.placedAt !== b.placedAt) return b.placedAt - a.placedAt;
  return compareText(a.id, b.id);
}

/** The host as it would be without the victims, keeping only the GPUs the guarantee covers. */
function without(host: Host, victims: readonly HeldShard[], guarantee: Guarantee): Host {
  const freed = new Map<string, number>();
  for (const victim of victims) {
    for (const uuid of victim.gpuUuids) {
      freed.set(uuid, (freed.get(uuid) ?? 0) + victim.reservedBytesPerGpu);
    }
  }
  const gpus: Gpu[] = [];
  for (const gpu of host.gpus) {
    if (!guaranteeCovers(guarantee, gpu.model)) continue;
    const less = freed.get(gpu.uuid) ?? 0;
    gpus.push(
      less === 0 ? gpu : { ...gpu, reservedBytes: bytes(Math.max(0, gpu.reservedBytes - less)) },
    );
  }
  return { ...host, gpus };
}

interface Candidate {
  readonly hostId: string;
  readonly victims: readonly HeldShard[];
  readonly placed: Placed;
  readonly topRank: number;
  readonly bytes: number;
}

function cheaper(a: Candidate, b: Candidate): boolean {
  if (a.topRank !== b.topRank) return a.topRank < b.topRank;
  if (a.victims.length !== b.victims.length) return a.victims.length < b.victims.length;
  if (a.bytes !== b.bytes) return a.bytes < b.bytes;
  return a.hostId < b.hostId;
}

export function chooseVictims(ask: ReclaimAsk, context: ReclaimContext): ReclaimResult {
  const { fleet, held, teams, coveredBytes, options = {} } = context;
  const fits = (host: Host, victims: readonly HeldShard[]): Placed | undefined => {
    const result = place(ask.request, [without(host, victims, ask.guarantee)], options);
    return result.kind === 'placed' ? result : undefined;
  };
  const eligible = held
    .filter((s) => s.teamId !== ask.teamId && s.preemptible && !s.leaving)
    .sort((a, b) => compareVictims(a, b, teams));
  const byHost = new Map<string, HeldShard[]>();
  for (const shard of eligible) {
    const list = byHost.get(shard.hostId);
    if (list === undefined) byHost.set(shard.hostId, [shard]);
    else list.push(shard);
  }
  let best: Candidate | undefined;
  for (const host of fleet) {
    const candidates = byHost.get(host.id);
    if (candidates === undefined) continue;
    if (fits(host, candidates) === undefined) continue;
    const taken = new Map<string, number>();
    const mayTake = (victim: HeldShard): boolean => {
      const team = teams.get(victim.teamId);
      if (team === undefined || !guaranteeCovers(team.guarantee, victim.gpuModel)) return true;
      const left =
        (coveredBytes.get(victim.teamId) ?? 0) -
        (taken.get(victim.teamId) ?? 0) -
        victim.quotaBytes;
      return left >= team.guarantee.bytes;
    };
    const chosen: HeldShard[] = [];
    let placed: Placed | undefined;
    for (const victim of candidates) {
      if (!mayTake(victim)) continue;
      chosen.push(victim);
      const team = teams.get(victim.teamId);
      if (team !== undefined && guaranteeCovers(team.guarantee, victim.gpuModel)) {
        taken.set(victim.teamId, (taken.get(victim.teamId) ?? 0) + victim.quotaBytes);
      }
      placed = fits(host, chosen);
      if (placed !== undefined) break;
    }
    if (placed === undefined) continue;
    // Give back victims the fit does not need, the last chosen (least due) first.
    for (let i = chosen.length - 1; i >= 0 && chosen.length > 1; i--) {
      const fewer = chosen.filter((_, j) => j !== i);
      const still = fits(host, fewer);
      if (still !== undefined) {
        chosen.splice(i, 1);
        placed = still;
      }
    }
    const candidate: Candidate = {
      hostId: host.id,
      victims: chosen,
      placed,
      topRank: Math.max(...chosen.map((v) => v.priorityRank)),
      bytes: chosen.reduce((sum, v) => sum + v.quotaBytes, 0),
    };
    if (best === undefined || cheaper(candidate, best)) best = candidate;
  }
  if (best === undefined) return { kind: 'none' };
  return { kind: 'reclaim', hostId: best.hostId, victims: best.victims, placed: best.placed };
}
