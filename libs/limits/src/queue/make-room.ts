/**
 * Making room by suspending idle elastic shards (docs/elastic.md): a waiting shard that does not
 * fit may fit once some idle elastic shards have moved their memory to host RAM. It is tried
 * before anything waits or is reclaimed; only elastic shards that are idle are taken, never one
 * already leaving.
 *
 * A suspended shard's cap stays promised on its GPUs (it moves from reserved to suspended), so
 * suspending frees room on the GPU, never in the oversubscription ratio: the waiting shard must
 * fit the ratio as it is. Each victim must also fit its host's budget of host RAM for suspended
 * shards, by its caps over all of its GPUs.
 *
 * Order, host by host: longest idle first, fair between teams: the teams take turns (the team
 * whose longest-idle shard has been idle longest goes first), each giving up its longest-idle
 * shard in its turn, so that one team's idle notebooks are not all suspended while another's
 * sit. Victims are added in that order until the waiting shard fits, then any the fit does not
 * need is given back (the last chosen first). Among hosts the one with the fewest victims wins,
 * then the fewest bytes moved, then the smaller host id.
 */
import type { Host } from '../inventory.js';
import {
  canResume,
  place,
  type Placed,
  type PlacementOptions,
  type PlacementRequest,
} from '../placement.js';
import { compareText } from '../placement-rules.js';
import { pinnedPlacement, withoutVictims } from './room-after-victims.js';
import type { HeldShard, SuspendedShard } from './model.js';

export interface MakeRoomAsk {
  readonly request: PlacementRequest;
  /** A suspended shard coming back: only its own host and GPUs, by the resident bound. */
  readonly resume?: SuspendedShard;
}

export type MakeRoomResult =
  | {
      readonly kind: 'suspend';
      readonly hostId: string;
      /** In the order they were chosen. */
      readonly victims: readonly HeldShard[];
      /** Where the waiting shard goes once they are suspended. */
      readonly placed: Placed;
    }
  | { readonly kind: 'none' };

/** Host RAM a shard's suspended memory takes, by its caps: its cap on each of its GPUs. */
export function hostBytesOf(shard: Pick<HeldShard, 'reservedBytesPerGpu' | 'gpuUuids'>): number {
  return shard.reservedBytesPerGpu * shard.gpuUuids.length;
}

/**
 * Whether the host's budget for suspended shards still takes `more` bytes, beside what it holds
 * and `alreadyAdded` (this pass's other suspends there).
 */
export function suspendBudgetTakes(host: Host, alreadyAdded: number, more: number): boolean {
  const budget = host.suspendBudgetBytes ?? 0;
  return (host.suspendedBytes ?? 0) + alreadyAdded + more <= budget;
}

/** The idle elastic shards of one host in the order they are suspended (see the top). */
export function suspendOrder(candidates: readonly HeldShard[]): HeldShard[] {
  const byTeam = new Map<string, HeldShard[]>();
  for (const shard of [...candidates].sort(longestIdleFirst)) {
    const list = byTeam.get(shard.teamId);
    if (list === undefined) byTeam.set(shard.teamId, [shard]);
    else list.push(shard);
  }
  const queues = [...byTeam.values()].sort((a, b) => longestIdleFirst(a[0]!, b[0]!));
  const order: HeldShard[] = [];
  for (let round = 0; order.length < candidates.length; round++) {
    for (const queue of queues) if (round < queue.length) order.push(queue[round]!);
  }
  return order;
}

function longestIdleFirst(a: HeldShard, b: HeldShard): number {
  const byIdle = (a.idleSince ?? Infinity) - (b.idleSince ?? Infinity);
  return byIdle !== 0 ? byIdle : compareText(a.id, b.id);
}

export function mayBeSuspended(shard: HeldShard): boolean {
  return shard.elastic === true && !shard.leaving && shard.idleSince !== undefined;
}

interface Candidate {
  readonly hostId: string;
  readonly victims: readonly HeldShard[];
  readonly placed: Placed;
  readonly bytes: number;
}

function better(a: Candidate, b: Candidate): boolean {
  if (a.victims.length !== b.victims.length) return a.victims.length < b.victims.length;
  if (a.bytes !== b.bytes) return a.bytes < b.bytes;
  return a.hostId < b.hostId;
}

/**
 * The idle elastic shards that may be suspended, per host, in the order of `held` (only the
 * ask's own host for a resume). An admission pass keeps this and drops each victim it takes,
 * so a waiting shard looks only at hosts that have one, not at the whole fleet.
 */
export function suspendableByHost(
  held: readonly HeldShard[],
  onlyHostId?: string,
): Map<string, HeldShard[]> {
  const byHost = new Map<string, HeldShard[]>();
  for (const shard of held) {
    if (!mayBeSuspended(shard)) continue;
    if (onlyHostId !== undefined && shard.hostId !== onlyHostId) continue;
    const list = byHost.get(shard.hostId);
    if (list === undefined) byHost.set(shard.hostId, [shard]);
    else list.push(shard);
  }
  return byHost;
}

/**
 * Which idle elastic shards to suspend so that the ask fits (fleet: every host as held and
 * placed now, promises included; held: shards that hold capacity and are not leaving).
 */
export function chooseIdleToSuspend(
  ask: MakeRoomAsk,
  fleet: readonly Host[],
  held: readonly HeldShard[],
  options: PlacementOptions = {},
  suspendingByHost: ReadonlyMap<string, number> = new Map(),
): MakeRoomResult {
  const byHost = suspendableByHost(held, ask.resume?.hostId);
  return chooseIdleOn(ask, fleet, byHost, options, suspendingByHost);
}

/**
 * chooseIdleToSuspend over the hosts given, with the suspendable shards per host already
 * gathered (suspendableByHost); hosts without one are skipped. The choice does not depend on
 * the hosts' order (fewest victims, fewest bytes, smallest host id), so a caller may give only
 * the hosts that have one.
 */
export function chooseIdleOn(
  ask: MakeRoomAsk,
  hosts: Iterable<Host>,
  byHost: ReadonlyMap<string, readonly HeldShard[]>,
  options: PlacementOptions = {},
  suspendingByHost: ReadonlyMap<string, number> = new Map(),
): MakeRoomResult {
  const fits = (host: Host, victims: readonly HeldShard[]): Placed | undefined => {
    const after = withoutVictims(
      host,
      victims.map((v) => ({ ...v, suspending: true })),
    );
    if (ask.resume !== undefined) {
      const gpus = new Map(after.gpus.map((gpu) => [gpu.uuid as string, gpu]));
      const resume = ask.resume;
      return resume.gpuUuids.every((uuid) => {
        const gpu = gpus.get(uuid);
        return gpu !== undefined && canResume(gpu, resume.reservedBytesPerGpu);
      })
        ? pinnedPlacement(resume)
        : undefined;
    }
    const result = place(ask.request, [after], options);
    return result.kind === 'placed' ? result : undefined;
  };
  let best: Candidate | undefined;
  for (const host of hosts) {
    const candidates = byHost.get(host.id);
    if (candidates === undefined || (host.suspendBudgetBytes ?? 0) <= 0) continue;
    const chosen: HeldShard[] = [];
    let added = suspendingByHost.get(host.id) ?? 0;
    let placed: Placed | undefined;
    for (const victim of suspendOrder(candidates)) {
      const more = hostBytesOf(victim);
      if (!suspendBudgetTakes(host, added, more)) continue;
      chosen.push(victim);
      added += more;
      placed = fits(host, chosen);
      if (placed !== undefined) break;
    }
    if (placed === undefined) continue;
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
      bytes: chosen.reduce((sum, v) => sum + hostBytesOf(v), 0),
    };
    if (best === undefined || better(candidate, best)) best = candidate;
  }
  if (best === undefined) return { kind: 'none' };
  return { kind: 'suspend', hostId: best.hostId, victims: best.victims, placed: best.placed };
}
