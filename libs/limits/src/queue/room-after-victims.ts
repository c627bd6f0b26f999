/**
 * The room shards that leave free for a waiting one: a suspended shard back on its own GPUs
 * (pinnedPlacement), the hosts as they will be once victims are gone (withoutVictims), and the
 * room a shard whose victims are still leaving will have (promisedRoom). Pure; used by the
 * admission pass (admission-freeing.ts, admission-room.ts) and make-room.ts.
 */
import { bytes } from '../sizes.js';
import type { Host } from '../inventory.js';
import {
  canResume,
  place,
  type Placed,
  type PlacementOptions,
  type PlacementRequest,
} from '../placement.js';
import type { HeldShard, SuspendedShard } from './model.js';

/** A suspended shard on its own GPUs, as a placement (GPUs in its order, which is by index). */
export function pinnedPlacement(resume: SuspendedShard): Placed {
  return {
    kind: 'placed',
    hostId: resume.hostId,
    gpuUuids: [...resume.gpuUuids],
    bytesPerGpu: bytes(resume.quotaBytes / resume.gpuUuids.length),
    reservedBytesPerGpu: resume.reservedBytesPerGpu,
  };
}
/**
 * Where a shard whose reclaim is in flight fits once its victims still held (leaving, reclaimed
 * for it) are gone, on their hosts as they are now (this pass's placements and promises
 * included); undefined when it has no victims left or does not fit there.
 */
export function promisedRoom(
  shardId: string,
  request: PlacementRequest,
  hosts: readonly Host[],
  held: readonly HeldShard[],
  options: PlacementOptions,
  resume?: SuspendedShard,
): Placed | undefined {
  const victims = held.filter((s) => s.leaving && s.reclaimFor === shardId);
  if (victims.length === 0) return undefined;
  const victimHosts = new Set(victims.map((v) => v.hostId as string));
  const candidates = hosts
    .filter((host) => victimHosts.has(host.id))
    .map((host) => withoutVictims(host, victims));
  if (resume !== undefined) {
    const own = candidates.find((host) => host.id === resume.hostId);
    const gpus = new Map(own?.gpus.map((gpu) => [gpu.uuid as string, gpu]));
    const fits = resume.gpuUuids.every((uuid) => {
      const gpu = gpus.get(uuid);
      return gpu !== undefined && canResume(gpu, resume.reservedBytesPerGpu);
    });
    return fits ? pinnedPlacement(resume) : undefined;
  }
  const result = place(request, candidates, options);
  return result.kind === 'placed' ? result : undefined;
}

/**
 * The host as it will be once the victims are gone: a stopped one's cap leaves its GPUs, a
 * suspended one's moves from reserved to suspended (it is still promised there).
 */
export function withoutVictims(host: Host, victims: readonly HeldShard[]): Host {
  const freed = new Map<string, number>();
  const parked = new Map<string, number>();
  for (const victim of victims) {
    for (const uuid of victim.gpuUuids) {
      freed.set(uuid, (freed.get(uuid) ?? 0) + victim.reservedBytesPerGpu);
      if (victim.suspending === true) {
        parked.set(uuid, (parked.get(uuid) ?? 0) + victim.reservedBytesPerGpu);
      }
    }
  }
  return {
    ...host,
    gpus: host.gpus.map((gpu) => {
      const less = freed.get(gpu.uuid) ?? 0;
      if (less === 0) return gpu;
      const more = parked.get(gpu.uuid) ?? 0;
      return {
        ...gpu,
        reservedBytes: bytes(Math.max(0, gpu.reservedBytes - less)),
        ...(more === 0 ? {} : { suspendedBytes: bytes((gpu.suspendedBytes ?? 0) + more) }),
      };
    }),
  };
}
