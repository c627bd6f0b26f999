/**
 * What registration does when an agent registers a host-RAM budget for suspended shards
 * (GPUSHARDS_SUSPEND_BUDGET) below what its shards already hold there, the host never lost
 * (docs/elastic.md, "For operators"; an agent restarted within the offline window). Nothing of
 * theirs was released, so lostShardReturn never sees them: this is their check.
 *
 * The rule: the caps of the host's shards in host RAM states (SUSPENDING, SUSPENDED, RESUMING)
 * are brought back within the budget by resuming SUSPENDED ones whose GPUs have room for them
 * (canResume on each GPU of their latest reservation, counting the resumes decided before
 * them), those whose resume is wanted first (they are coming back anyway), then the largest
 * caps (fewest moves), then by id; only as many as needed. What is still over after that
 * stays SUSPENDED, and the host is over its budget until resumes, stops or deletes bring it
 * under: every suspend there is refused meanwhile (the control plane's suspend check and the
 * agent's both count what is held against the budget), so the excess never grows.
 *
 * Why kept rather than FAILED, as a lost shard's return that fits nowhere is: nothing is
 * promised anew here. The return takes a share of the budget again after holding none; these
 * shards never stopped holding theirs, their memory is in host RAM already, and failing them
 * would free that RAM only by throwing away their work, which suspending exists to keep. Their
 * caps still fit every GPU's promise bound (that did not move), so each can resume when room
 * comes. Why not SUSPENDING or RESUMING ones: a SUSPENDING shard holds its reservation and is
 * on its way (stopping it half way is the agent's undo, not a decision), a RESUMING one is
 * already leaving host RAM.
 */
import { canResume, type GpuCapacity } from './placement.js';
import type { ShardState } from './lifecycle/states.js';
import { bytes, type Bytes } from './sizes.js';

/** One shard of the host in a host RAM state. */
export interface HostRamShard {
  readonly id: string;
  readonly state: ShardState;
  readonly capBytesPerGpu: Bytes;
  readonly gpuCount: number;
  /** The GPUs of its latest reservation (a suspended shard comes back only there). */
  readonly gpuUuids: readonly string[];
  /** A resume is wanted (resume_wanted_at is set). */
  readonly resumeWanted: boolean;
}

/** One GPU of the host, as it stands now (its row locked). */
export interface ReliefGpu extends GpuCapacity {
  readonly uuid: string;
  /** The host no longer lists it: nothing comes back onto it. */
  readonly missing?: boolean;
}

export interface BudgetRelief {
  /** SUSPENDED shards to resume now (RESUMING, their caps reserved on their GPUs), in order. */
  readonly resume: readonly string[];
  /** By how much the host stays over its budget once those resumes end (0: within it). */
  readonly overBytes: number;
}

export function suspendBudgetRelief(
  budgetBytes: number,
  shards: readonly HostRamShard[],
  gpus: readonly ReliefGpu[],
): BudgetRelief {
  let held = shards.reduce((sum, shard) => sum + shard.capBytesPerGpu * shard.gpuCount, 0);
  if (held <= budgetBytes) return { resume: [], overBytes: 0 };
  const reserved = new Map<string, number>(gpus.map((gpu) => [gpu.uuid, gpu.reservedBytes]));
  const byUuid = new Map(gpus.map((gpu) => [gpu.uuid, gpu]));
  const candidates = shards
    .filter((shard) => shard.state === 'SUSPENDED')
    .sort(
      (a, b) =>
        Number(b.resumeWanted) - Number(a.resumeWanted) ||
        b.capBytesPerGpu * b.gpuCount - a.capBytesPerGpu * a.gpuCount ||
        (a.id < b.id ? -1 : a.id > b.id ? 1 : 0),
    );
  const resume: string[] = [];
  for (const shard of candidates) {
    if (held <= budgetBytes) break;
    const its = shard.gpuUuids.map((uuid) => byUuid.get(uuid));
    const fits =
      its.length === shard.gpuCount &&
      its.every(
        (gpu) =>
          gpu !== undefined &&
          gpu.missing !== true &&
          canResume(
            { ...gpu, reservedBytes: bytes(reserved.get(gpu.uuid)!) },
            shard.capBytesPerGpu,
          ),
      );
    if (!fits) continue;
    for (const uuid of shard.gpuUuids) {
      reserved.set(uuid, reserved.get(uuid)! + shard.capBytesPerGpu);
    }
    held -= shard.capBytesPerGpu * shard.gpuCount;
    resume.push(shard.id);
  }
  return { resume, overBytes: Math.max(0, held - budgetBytes) };
}
