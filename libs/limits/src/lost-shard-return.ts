/**
 * What a LOST shard becomes when its host speaks again and its agent still runs its container
 * (docs/elastic.md, "The lifecycle"; docs/fleet-and-shards.md, "Offline hosts"). While the host
 * was away the shard held nothing: its reservation, its suspended cap and its share of the
 * host's budget were released. Coming back it must take them again within every bound, the
 * same bounds a placement, a suspend and a resume keep:
 *
 * - each GPU's resident bound: reserved ≤ total − unowned (canReserve);
 * - each GPU's promise bound: reserved + suspended ≤ floor(total × ratio) (canReserve, and what
 *   a suspended cap takes, since it counts among the suspended bytes);
 * - the host's budget for suspended shards: the caps of its shards in host RAM states ≤ budget.
 *
 * Those bounds can have moved while it was away: an admin may lower a GPU's ratio (nothing of
 * the lost shard counted then), an agent may come back registering a smaller GPU or a smaller
 * GPUSHARDS_SUSPEND_BUDGET, a GPU may be missing. The rule, per memory seen:
 *
 * - all on the GPU: RUNNING if its reservation fits again on every GPU, else FAILED (as before);
 * - all in host RAM: SUSPENDED if its cap fits every GPU's promise bound and the host's
 *   budget; else RESUMING if its memory fits back on its GPUs (the budget is what failed: the
 *   memory leaves host RAM for room it has); else FAILED;
 * - half moved (a suspend or resume the loss cut short): SUSPENDING with its reservation taken
 *   again if it fits every GPU and its cap the host's budget, so that the agent finishes the
 *   suspend and the SUSPENDED event releases the reservation (as any suspend's does); RESUMING
 *   if only the budget lacks room; else FAILED. Not SUSPENDED at once: part of its memory is
 *   still on its GPUs until the agent has moved it, and with no reservation there a shard
 *   placed in that gap could be refused below its own cap. Nor SUSPENDED when its GPUs have no
 *   room for the reservation: the same gap, for as long as the suspend takes.
 *
 * Why not SUSPENDED past a bound: the bounds are promises to the other shards. At ratio 1 the
 * promise bound is what lets every suspended shard come back (their caps add up to no more than
 * the card); one more past it would take a neighbour's room when it resumed first. The budget
 * keeps host RAM for the containers beside it, and the agent enforces it too: a half-moved
 * shard past it would never finish its suspend, its rest left on a GPU nothing reserves for
 * it, so a shard placed there would be refused inside its own cap. So a return that fits
 * nowhere ends like a resident shard whose GPUs were given away: FAILED, its container
 * stopped, every bound exact and no neighbour refused within its cap. It happens only when an
 * operator moved a bound below what was promised while the host was away.
 *
 * Its wanted resume: a shard that comes back SUSPENDED keeps a resume that was wanted before
 * the loss, and one whose last suspend was a reclaim's is owed its resume (a reclaimed shard
 * loses no work: it comes back when room does), even when the loss came before the suspend
 * finished (a SUSPENDING victim had none wanted yet). One that comes back SUSPENDING needs
 * nothing here: its wanted resume is kept, and its suspend ends SUSPENDED as any other does
 * (a reclaim's wanting its resume then).
 */
import type { ObservedMemory } from './lifecycle/convergence.js';
import type { SuspendCause } from './lifecycle/transitions.js';
import { DEFAULT_OVERCOMMIT_RATIO } from './inventory.js';
import { canReserve, promiseBytes, type GpuCapacity } from './placement.js';
import { bytes, type Bytes, formatSize } from './sizes.js';

/** The returning shard, as its row and its agent's report say. */
export interface ReturningShard {
  /** Where its agent found its GPU memory (its container runs). */
  readonly memory: ObservedMemory;
  /** Its cap on each of its GPUs (what it reserves on each, and suspends from each). */
  readonly capBytesPerGpu: Bytes;
  readonly gpuCount: number;
  /** A resume was wanted before it was lost (resume_wanted_at is set). */
  readonly resumeWanted: boolean;
  /** Why it was last suspended (null: never). */
  readonly suspendCause: SuspendCause | null;
}

/** One GPU of the shard's latest reservation, as it stands now (its row locked). */
export interface ReturnGpu extends GpuCapacity {
  readonly uuid: string;
  /** The host no longer lists it (missing_since is set): it takes nothing. */
  readonly missing?: boolean;
}

/** Where the shard could go back to, as it stands now. */
export interface ReturnRoom {
  /** The GPUs of its latest reservation (a shard's memory lives on those GPUs only). */
  readonly gpus: readonly ReturnGpu[];
  /** The host's budget for suspended shards (0: it does not suspend). */
  readonly suspendBudgetBytes: number;
  /** The caps of the host's shards in host RAM states now (SUSPENDING, SUSPENDED, RESUMING). */
  readonly suspendedBytes: number;
  readonly defaultOvercommitRatio?: number;
}

export type LostShardReturn =
  /** Its memory on its GPUs: its reservation taken again (cause recovered). */
  | { readonly kind: 'running' }
  /** Its memory in host RAM: its cap suspended on its GPUs, a stay opened (cause recovered). */
  | { readonly kind: 'suspended'; readonly resumeWanted: boolean }
  /**
   * Its memory half moved: its reservation taken again until the agent finishes the suspend
   * (its cap counts against the host's budget meanwhile, as any SUSPENDING shard's does).
   */
  | { readonly kind: 'suspending' }
  /** Its memory in host RAM past the host's budget, with room on its GPUs: moved back. */
  | { readonly kind: 'resuming' }
  /** No bound has room for it: FAILED, its container stopped. */
  | { readonly kind: 'failed'; readonly reason: string };

/** A GPU-resident return that does not fit: the reason a shard has always been given. */
export const GPUS_GIVEN_AWAY = 'its GPUs were given to other shards while its host was offline';

export function lostShardReturn(shard: ReturningShard, room: ReturnRoom): LostShardReturn {
  const cap = shard.capBytesPerGpu;
  const gone = missingGpus(shard, room);
  if (gone !== undefined) return { kind: 'failed', reason: gone };
  const ratio = room.defaultOvercommitRatio ?? DEFAULT_OVERCOMMIT_RATIO;
  const residentFits = room.gpus.every((gpu) => canReserve(gpu, cap, ratio));
  if (shard.memory === 'resident') {
    return residentFits ? { kind: 'running' } : { kind: 'failed', reason: GPUS_GIVEN_AWAY };
  }
  const caps = cap * shard.gpuCount;
  const budgetFits = room.suspendedBytes + caps <= room.suspendBudgetBytes;
  if (shard.memory === 'partial') {
    if (residentFits) return budgetFits ? { kind: 'suspending' } : { kind: 'resuming' };
    return {
      kind: 'failed',
      reason:
        `its GPU memory (${size(cap)} per GPU) was half moved to host RAM when its host came ` +
        `back, and its GPUs no longer have room to reserve what is left on them until the ` +
        `move ends: ${GPUS_GIVEN_AWAY}`,
    };
  }
  const overPromise = room.gpus.filter(
    (gpu) => gpu.reservedBytes + (gpu.suspendedBytes ?? 0) + cap > promiseBytes(gpu, ratio),
  );
  if (overPromise.length === 0 && budgetFits) {
    return {
      kind: 'suspended',
      resumeWanted: shard.resumeWanted || shard.suspendCause === 'reclaim',
    };
  }
  if (residentFits) return { kind: 'resuming' };
  const why: string[] = overPromise.map(
    (gpu) =>
      `GPU ${gpu.uuid} promises ${size(promiseBytes(gpu, ratio))} in all ` +
      `(memory × overcommit ratio) and ${size(gpu.reservedBytes + (gpu.suspendedBytes ?? 0))} ` +
      `of it is taken`,
  );
  if (!budgetFits) {
    why.push(
      `its host's budget for suspended shards (GPUSHARDS_SUSPEND_BUDGET) is ` +
        `${size(room.suspendBudgetBytes)} and ${size(room.suspendedBytes)} of it is taken`,
    );
  }
  return {
    kind: 'failed',
    reason:
      `its GPU memory (${size(cap)} per GPU) was in host RAM when its host came back, ` +
      `and neither stays there nor fits back on its GPUs: ${why.join('; ')}`,
  };
}

/** Why its GPUs are not all there to take it; undefined when they are. */
function missingGpus(shard: ReturningShard, room: ReturnRoom): string | undefined {
  const missing = room.gpus.filter((gpu) => gpu.missing === true).map((gpu) => gpu.uuid);
  if (missing.length > 0) {
    return `its host came back without GPU ${missing.join(', ')}, where its memory lived`;
  }
  if (room.gpus.length !== shard.gpuCount) {
    return `its host came back with ${room.gpus.length} of its ${shard.gpuCount} GPUs`;
  }
  return undefined;
}

/** A byte count for a reason (sums past MAX_BYTES cannot happen: they are rows' sums). */
function size(value: number): string {
  return formatSize(bytes(value));
}
