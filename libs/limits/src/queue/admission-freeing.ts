/**
 * Room freed for a shard that cannot be placed: idle elastic shards suspended for it
 * (make-room.ts chooses them), or, within its team's guarantee, borrowed shards reclaimed
 * (reclaim.ts chooses them; each is stopped, or suspended where its host's budget takes it).
 * Either way the room they free is promised to the shard as its spot, and while they are
 * still leaving it waits on that room.
 */
import { canReserve, type PlacementRequest } from '../placement.js';
import { leaveStaying, recordSuspension, wait, type Pass } from './admission-pass.js';
import { promisedRoom, withoutVictims } from './room-after-victims.js';
import { guaranteeCovers, type Guarantee } from './guarantees.js';
import {
  chooseIdleOn,
  chooseIdleToSuspend,
  hostBytesOf,
  suspendBudgetTakes,
  type MakeRoomAsk,
  type MakeRoomResult,
} from './make-room.js';
import type { HeldShard, PendingShard, SuspendedShard } from './model.js';
import { chooseVictims, type ReclaimResult } from './reclaim.js';

/**
 * Idle elastic shards are suspended so that the shard fits (make-room.ts): they leave the
 * reclaimable, and the room they free is promised to it as its spot. False when none would do.
 */
export function makeRoom(pass: Pass, shard: PendingShard, ask: MakeRoomAsk): boolean {
  const result = pass.whole
    ? chooseIdleToSuspend(
        ask,
        pass.room.fleetNow(),
        pass.stayingHeld,
        pass.options,
        pass.suspendingByHost,
      )
    : chooseIdleOnIndexed(pass, ask);
  if (result === undefined || result.kind === 'none') return false;
  const ids = new Set<string>();
  for (const victim of result.victims) {
    ids.add(victim.id);
    recordSuspension(pass, victim, 'make-room', shard.id);
  }
  leaveStaying(pass, result.victims, ids);
  pass.room.promise(shard.id, result.placed);
  wait(pass, shard, { kind: 'suspending', victimIds: [...ids] }, result.placed);
  return true;
}

/**
 * chooseIdleToSuspend over the hosts that have an idle elastic shard only (the pass's index):
 * the same choice (it does not depend on the hosts' order), and nothing asked of the fleet
 * when no host has one. Undefined: none.
 */
function chooseIdleOnIndexed(pass: Pass, ask: MakeRoomAsk): MakeRoomResult | undefined {
  let byHost: ReadonlyMap<string, readonly HeldShard[]> = pass.suspendable;
  if (ask.resume !== undefined) {
    const own = pass.suspendable.get(ask.resume.hostId);
    byHost = own === undefined ? new Map() : new Map([[ask.resume.hostId, own]]);
  }
  if (byHost.size === 0) return undefined;
  return chooseIdleOn(
    ask,
    pass.room.hostsNow(byHost.keys()),
    byHost,
    pass.options,
    pass.suspendingByHost,
  );
}

/**
 * Borrowed shards are chosen as victims for a shard within its team's guarantee (reclaim.ts)
 * and recorded as reclaimed for it. False when no choice of victims would make it fit.
 */
export function reclaim(pass: Pass, shard: PendingShard, guarantee: Guarantee): boolean {
  const result = chooseVictims(
    { request: shard.request, teamId: shard.teamId, guarantee },
    {
      fleet: pass.room.fleetNow(),
      held: pass.stayingHeld,
      teams: pass.teams,
      coveredBytes: pass.covered,
      options: pass.options,
    },
  );
  if (result.kind !== 'reclaim') return false;
  recordReclaim(pass, shard, result);
  return true;
}

/**
 * Victims are stopped for the shard: they leave the reclaimable and their teams' coverage, and
 * the room they free is promised to it as its spot.
 */
function recordReclaim(
  pass: Pass,
  shard: PendingShard,
  result: Extract<ReclaimResult, { kind: 'reclaim' }>,
): void {
  const ids = new Set(result.victims.map((v) => v.id));
  const suspended = suspendableVictims(pass, result);
  for (const victim of result.victims) {
    if (suspended.has(victim.id)) recordSuspension(pass, victim, 'reclaim', shard.id);
    else {
      pass.preemptions.push({
        victimId: victim.id,
        victimTeamId: victim.teamId,
        forShardId: shard.id,
        hostId: victim.hostId,
      });
    }
    const victimTeam = pass.teams.get(victim.teamId);
    if (victimTeam !== undefined && guaranteeCovers(victimTeam.guarantee, victim.gpuModel)) {
      pass.covered.set(victim.teamId, (pass.covered.get(victim.teamId) ?? 0) - victim.quotaBytes);
    }
  }
  leaveStaying(pass, result.victims, ids);
  pass.room.promise(shard.id, result.placed);
  wait(
    pass,
    shard,
    { kind: 'reclaiming', victimIds: result.victims.map((v) => v.id) },
    result.placed,
  );
}

/**
 * The victims of a reclaim that are suspended instead of stopped: the elastic ones, while the
 * host's budget for suspended shards takes them, and only if the waiting shard still fits with
 * their caps left promised on their GPUs (suspended, not gone); else every victim is stopped.
 */
function suspendableVictims(
  pass: Pass,
  result: Extract<ReclaimResult, { kind: 'reclaim' }>,
): Set<string> {
  const host = pass.room.fleetNow().find((h) => h.id === result.hostId);
  const chosen = new Set<string>();
  if (host === undefined) return chosen;
  let added = pass.suspendingByHost.get(host.id) ?? 0;
  for (const victim of result.victims) {
    if (victim.elastic !== true) continue;
    const more = hostBytesOf(victim);
    if (!suspendBudgetTakes(host, added, more)) continue;
    chosen.add(victim.id);
    added += more;
  }
  if (chosen.size === 0) return chosen;
  const after = withoutVictims(
    host,
    result.victims.map((v) => (chosen.has(v.id) ? { ...v, suspending: true } : v)),
  );
  const stillFits = result.placed.gpuUuids.every((uuid) => {
    const gpu = after.gpus.find((g) => g.uuid === uuid);
    return (
      gpu !== undefined &&
      canReserve(gpu, result.placed.reservedBytesPerGpu, pass.options.defaultOvercommitRatio)
    );
  });
  return stillFits ? chosen : new Set();
}

/**
 * A shard whose victims are still leaving (reclaimed or suspended for it) waits on the room
 * they free, promised to it in every view. False when that room no longer takes it (a shard
 * ahead took it): it then waits without a promise and frees room again once they are gone.
 */
export function waitOnPromisedRoom(
  pass: Pass,
  shard: PendingShard,
  request: PlacementRequest,
  kind: 'reclaiming' | 'suspending',
  resume?: SuspendedShard,
): boolean {
  const promisedTo = promisedRoom(
    shard.id,
    request,
    pass.room.fleetNow(),
    pass.held,
    pass.options,
    resume,
  );
  if (promisedTo === undefined) return false;
  pass.room.promise(shard.id, promisedTo);
  wait(pass, shard, { kind, victimIds: [] }, promisedTo);
  return true;
}
