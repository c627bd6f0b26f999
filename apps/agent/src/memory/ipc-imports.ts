/**
 * Imported GPU memory (docs/elastic.md, "What cannot be suspended"): the driver's checkpoint API
 * locks and checkpoints a process that opened another process's GPU memory (CUDA IPC,
 * cuIpcOpenMemHandle; or a VMM shareable handle, cuMemImportFromShareableHandle) and then
 * refuses every restore of it (CUDA_ERROR_INVALID_VALUE, CUDA_ERROR_NOT_SUPPORTED): the process
 * would be left CHECKPOINTED with its CUDA calls hanging. libvgpu.so names each process
 * that holds such an import in the shard's region (gpushards_region.h, ipc_importers); a
 * suspend of a shard with one alive is refused before anything is locked.
 */
import type { NamespacedProcess } from '../compute/process-launches.js';
import type { Logger } from '../logging/logger.js';
import type { RegionProcess } from '../regions/region-file.js';
import type { RegionsService } from '../regions/regions.service.js';
import { NotSuspendableError } from '../shards/shard-record.js';
import type { ContainerMemory } from './container-memory.js';

/** A process of the container as the agent finds it: its host PID and its own view of itself. */
export interface ContainerProcess extends NamespacedProcess {
  readonly hostPid: number;
}

/** What a shard's region says of CUDA IPC imports. */
export interface IpcImports {
  /** The processes whose slot is marked (alive or not: the region cannot say). */
  readonly importers: readonly RegionProcess[];
  /** A process past the marked slots opened one: no suspend is safe while the region lasts. */
  readonly unlisted: boolean;
}

/**
 * The container's live processes that the region marks as holding an import: the same PID in
 * the container's namespace and the same start time (either 0: unknown, the PID decides). A
 * SIGKILLed importer's mark stays until its slot is reclaimed; it names no live process, so it
 * never stands in a suspend's way. Pure.
 */
export function liveImporters(
  imports: IpcImports,
  live: readonly ContainerProcess[],
): ContainerProcess[] {
  return live.filter((process) =>
    imports.importers.some(
      (marked) =>
        marked.pid === process.nsPid &&
        (marked.startTime === 0n ||
          process.startTime === 0n ||
          marked.startTime === process.startTime),
    ),
  );
}

/**
 * Why the shard cannot be suspended, for NOT_SUSPENDABLE (and the SUSPEND_FAILED the user
 * sees in Shard.memory.lastError); undefined when nothing stands in the way.
 */
export function ipcRefusal(
  shardId: string,
  imports: IpcImports,
  holding: readonly ContainerProcess[],
): string | undefined {
  const cure =
    'The shard keeps running on its GPU. To make it suspendable, close those imports ' +
    '(cuIpcCloseMemHandle, or cuMemUnmap and cuMemRelease; in PyTorch, let go of the CUDA ' +
    'tensors other processes shared) or end the processes that hold them (docs/elastic.md, ' +
    '"What cannot be suspended").';
  const why =
    'the driver cannot restore such a process once it is checkpointed: it would hang for good, ' +
    'so nothing was moved.';
  const what =
    'GPU memory another process shared with it (CUDA IPC: cuIpcOpenMemHandle, CUDA tensors ' +
    'passed between processes; or a VMM shareable handle: cuMemImportFromShareableHandle, NCCL ' +
    'between the ranks of one host)';
  if (holding.length > 0) {
    const named = holding
      .map((process) => `${process.hostPid} (pid ${process.nsPid} in its container)`)
      .join(', ');
    const s = holding.length === 1 ? '' : 'es';
    return `shard ${shardId} cannot be suspended: process${s} ${named} hold${holding.length === 1 ? 's' : ''} ${what}, and ${why} ${cure}`;
  }
  if (imports.unlisted) {
    return (
      `shard ${shardId} cannot be suspended: a process of its container imported ${what} ` +
      'while more than 256 of its processes used CUDA, past what its region can name, so ' +
      `nothing says when that import ends until the shard restarts; ${why} ${cure}`
    );
  }
  return undefined;
}

/**
 * Throws NotSuspendableError when a live process of the container holds a CUDA IPC import.
 * MemoryService asks before anything is locked, and again once every process is locked and
 * before the first checkpoint (an import opened between the two). A region that cannot be read
 * says nothing either way: the suspend goes on as it did before imports were named.
 */
export async function refuseIpcImporters(
  regions: Pick<RegionsService, 'ipcImports'>,
  containers: Pick<ContainerMemory, 'namespaced'>,
  logger: Logger,
  shardId: string,
  containerId: string,
): Promise<void> {
  let imports: IpcImports;
  try {
    imports = await regions.ipcImports(shardId);
  } catch (error) {
    logger.warn(
      { err: error, shardId },
      'cannot read its region for CUDA IPC imports; the suspend goes on',
    );
    return;
  }
  if (imports.importers.length === 0 && !imports.unlisted) return;
  const reason = ipcRefusal(
    shardId,
    imports,
    liveImporters(imports, containers.namespaced(containerId)),
  );
  if (reason !== undefined) throw new NotSuspendableError(reason);
}
