import { join } from 'node:path';

import { Inject, Injectable } from '@nestjs/common';
import {
  clampBytes,
  formatSize,
  targetOf,
  type MoveDirection,
  type ObservedMemory,
} from '@gpushards/limits';
import type { MemoryResidency, SuspendCommand } from '@gpushards/protocol';

import { KeyedMutex } from '../common/keyed-mutex.js';
import { AGENT_CONFIG, type AgentConfig } from '../config/agent-options.js';
import { GpusService } from '../gpus/gpus.service.js';
import { LimitsService } from '../limits/limits.service.js';
import { LOGGER, type Logger } from '../logging/logger.js';
import { AgentMetrics } from '../metrics/agent-metrics.js';
import { RegionsService } from '../regions/regions.service.js';
import { MemoryCommands, type MemoryMover } from '../shards/memory-commands.js';
import {
  NotSuspendableError,
  UnknownShardError,
  type ShardRecord,
} from '../shards/shard-record.js';
import { ShardsService } from '../shards/shards.service.js';
import type { CheckpointApi } from './checkpoint-driver.js';
import { ContainerMemory } from './container-memory.js';
import { refuseIpcImporters } from './ipc-imports.js';
import { MemoryBook, sumOf, type ShardMemory } from './memory-book.js';
import { executeMove, type MoveOutcome } from './memory-move.js';
import { SUSPEND_CAPABILITY, type SuspendCapability } from './suspend-capability.js';
import { SuspendedBytesStore } from './suspended-bytes.js';

/** Who asked for a move: a command's cause, or the reconcile converging on the desired state. */
export type MoveCause = SuspendCommand['cause'] | 'resume-requested' | 'reconcile';

/** How long a lock waits for a process's CUDA calls to let go (a kernel running that long). */
export const LOCK_TIMEOUT_MS = 10_000;

/**
 * Where the GPU memory of this host's running shards is, and its moves (docs/elastic.md): the
 * control plane's suspend and resume commands, and the reconcile's convergence. One move per
 * shard at a time (a second for the same direction joins the first; one for the other waits
 * for it), outside the shard's operation lock: a stop or delete is never held up by a
 * checkpoint, and a move whose container went away ends quietly.
 */
@Injectable()
export class MemoryService implements MemoryMover {
  private readonly logger: Logger;
  private readonly book: MemoryBook;
  private readonly mutex = new KeyedMutex();
  /** Reads where containers' memory is; undefined when this host does not suspend. */
  private readonly containers: ContainerMemory | undefined;
  private readonly moveListeners = new Set<(shardId: string, direction: MoveDirection) => void>();
  private readonly endListeners = new Set<
    (shardId: string, direction: MoveDirection, ok: boolean) => void
  >();

  constructor(
    @Inject(AGENT_CONFIG) private readonly config: AgentConfig,
    @Inject(SUSPEND_CAPABILITY) readonly capability: SuspendCapability,
    private readonly shards: ShardsService,
    private readonly limits: LimitsService,
    private readonly gpus: GpusService,
    private readonly regions: RegionsService,
    private readonly metrics: AgentMetrics,
    commands: MemoryCommands,
    @Inject(LOGGER) logger: Logger,
  ) {
    this.logger = logger.child({ module: 'memory' });
    this.book = new MemoryBook(
      new SuspendedBytesStore(join(config.stateDir, 'memory')),
      (shardId) => {
        const record = shards.get(shardId);
        return record !== undefined && isRunning(record) ? record.containerId : undefined;
      },
      this.logger,
    );
    this.containers =
      capability.kind === 'available'
        ? new ContainerMemory(config.enforcement.procRoot, capability.api, (shardId) =>
            limits.memory(shardId),
          )
        : undefined;
    commands.serve(this);
    metrics.suspendBudgetBytes.set(capability.kind === 'available' ? capability.budgetBytes : 0);
    metrics.suspendedSource = () => this.book.totals();
    if (capability.kind === 'unavailable') {
      this.logger.info({ reason: capability.reason }, 'this host does not suspend shards');
    } else {
      this.logger.info(
        { budgetBytes: capability.budgetBytes, driver: capability.api.libraryPath },
        'this host suspends shards',
      );
    }
  }

  /** What the host registers: its budget, or 0 and why not. */
  hostInfo(): { suspendBudgetBytes: number; suspendUnavailableReason?: string } {
    return this.capability.kind === 'available'
      ? { suspendBudgetBytes: this.capability.budgetBytes }
      : { suspendBudgetBytes: 0, suspendUnavailableReason: this.capability.reason };
  }

  /** Called when a move of a shard's memory starts. */
  onMoveStart(listener: (shardId: string, direction: MoveDirection) => void): void {
    this.moveListeners.add(listener);
  }

  /** Called when a move has ended and its last event (SUSPENDED … RESUME_FAILED) was published. */
  onMoveEnd(listener: (shardId: string, direction: MoveDirection, ok: boolean) => void): void {
    this.endListeners.add(listener);
  }

  suspend(shardId: string, cause: MoveCause = 'suspend-requested'): Promise<MemoryResidency> {
    return this.take(shardId, 'suspend', cause);
  }

  resume(shardId: string, cause: MoveCause = 'resume-requested'): Promise<MemoryResidency> {
    return this.take(shardId, 'resume', cause);
  }

  /** Where a shard's memory is now (undefined: the agent does not suspend, or knows nothing). */
  memoryOf(shardId: string): { memory: ObservedMemory; suspendedBytes?: number } | undefined {
    if (this.capability.kind !== 'available') return undefined;
    const known = this.book.of(shardId, this.shards.get(shardId)?.containerId);
    if (known === undefined) return undefined;
    const bytes = known.suspended && sumOf(known.suspended);
    return known.memory !== 'resident' && bytes !== undefined
      ? { memory: known.memory, suspendedBytes: bytes }
      : { memory: known.memory };
  }

  /** True while a move of the shard's memory runs or waits. */
  moving(shardId: string): MoveDirection | undefined {
    return this.book.moving(shardId);
  }

  /**
   * Reads where the memory of every running shard container is, from the driver (one pass
   * over /proc for all of them); undefined when this host does not suspend (every running
   * container is then resident). Shards the agent no longer runs are forgotten.
   */
  async observeAll(): Promise<ReadonlyMap<string, ObservedMemory> | undefined> {
    if (this.containers === undefined) return undefined;
    const running = new Map(
      this.shards
        .list()
        .filter(isRunning)
        .map((record) => [record.shardId, record.containerId!]),
    );
    const found = await this.containers.observeAll(
      [...running].map(([shardId, containerId]) => ({ shardId, containerId })),
    );
    const seen = new Map<string, ObservedMemory>();
    for (const [shardId, memory] of found) {
      if (memory instanceof Error) {
        this.logger.warn({ err: memory, shardId }, 'cannot read where its memory is');
        continue;
      }
      seen.set(shardId, memory);
      this.book.entry(shardId, running.get(shardId)!).memory = memory;
    }
    this.book.forgetAllBut(
      new Set(running.keys()),
      (shardId) => this.shards.get(shardId) === undefined,
    );
    return seen;
  }

  private async take(
    shardId: string,
    direction: MoveDirection,
    cause: MoveCause,
  ): Promise<MemoryResidency> {
    try {
      return await this.takeOn(shardId, direction, cause);
    } catch (error) {
      if (error instanceof NotSuspendableError) {
        this.metrics.moves.inc({ direction, cause, outcome: 'refused' });
        if (direction === 'suspend') await this.reportRefused(shardId, error);
      }
      throw error;
    }
  }

  /**
   * A refused suspend of a running shard ends as SUSPEND_FAILED with the reason, as one the
   * driver refused does: the control plane, which moved the shard to SUSPENDING when it decided,
   * moves it back to RUNNING (else it would wait in SUSPENDING for a move that never comes, the
   * reconcile and the stuck-shard sweeper asking again and again) and keeps the reason for the
   * user (Shard.memory.lastError).
   */
  private async reportRefused(shardId: string, error: NotSuspendableError): Promise<void> {
    const record = this.shards.get(shardId);
    if (record === undefined || !isRunning(record)) return;
    await this.shards
      .reportMemory(shardId, 'SUSPEND_FAILED', { reason: `suspend refused: ${error.message}` })
      .catch((failure: unknown) =>
        this.logger.warn({ err: failure, shardId }, 'could not report a refused suspend'),
      );
  }

  /** Refused before anything is locked, and again before the first checkpoint (ipc-imports.ts). */
  private refuseIpcImporters(
    containers: ContainerMemory,
    shardId: string,
    containerId: string,
  ): Promise<void> {
    return refuseIpcImporters(this.regions, containers, this.logger, shardId, containerId);
  }

  private async takeOn(
    shardId: string,
    direction: MoveDirection,
    cause: MoveCause,
  ): Promise<MemoryResidency> {
    if (this.capability.kind !== 'available' || this.containers === undefined) {
      throw new NotSuspendableError(
        this.capability.kind === 'unavailable' ? this.capability.reason : 'no checkpoint API',
      );
    }
    const api = this.capability.api;
    const containers = this.containers;
    const record = this.shards.get(shardId);
    if (record === undefined) {
      throw new UnknownShardError(`shard ${shardId} is not on host ${this.config.hostId}`);
    }
    if (!isRunning(record)) {
      throw new NotSuspendableError(
        `shard ${shardId}'s container is not running (${record.state.toLowerCase()}): its memory went with its processes`,
      );
    }
    const known = this.book.entry(shardId, record.containerId!);
    if (known.move?.direction === direction) return known.memory; // joins the move in flight
    const { processes, memory } = await containers.inspect({
      shardId,
      containerId: record.containerId!,
    });
    known.memory = memory;
    const failed = processes.filter((p) => p.state === 'failed').map((p) => p.pid);
    if (direction === 'suspend' && failed.length > 0) {
      // Refused before anything moves: the driver can do nothing more with such a process.
      throw new NotSuspendableError(
        `the driver failed process ${failed.join(', ')} of shard ${shardId} (CU_PROCESS_STATE_FAILED: an uncorrectable error in an earlier checkpoint or restore): its memory cannot be moved; only restarting it helps`,
      );
    }
    if (direction === 'suspend' && memory !== 'suspended') {
      await this.refuseIpcImporters(containers, shardId, record.containerId!);
    }
    if (known.move === undefined && memory === targetOf(direction)) {
      // Already there: told again (the event that said so may have gone to no one).
      await this.shards.reportMemory(shardId, direction === 'suspend' ? 'SUSPENDED' : 'RESUMED', {
        ...(known.moved !== undefined ? { moved: known.moved } : {}),
      });
      return memory;
    }
    if (direction === 'suspend') await this.checkBudget(shardId);
    const done = this.mutex.run(shardId, () =>
      this.run(api, containers, shardId, direction, cause),
    );
    const move = { direction, done };
    known.move = move;
    void done.finally(() => {
      if (known.move === move) delete known.move;
    });
    return memory;
  }

  /**
   * The last line behind the control plane's own check: the caps of the shards whose memory is
   * in host RAM (or on its way), with this one's, stay within the host's budget.
   */
  private async checkBudget(shardId: string): Promise<void> {
    if (this.capability.kind !== 'available') return;
    const budget = this.capability.budgetBytes;
    let held = 0;
    for (const [other, known] of this.book.live()) {
      if (other === shardId) continue;
      if (known.memory !== 'resident' || known.move?.direction === 'suspend') {
        held += await this.limits.capsTotal(other).catch(() => 0);
      }
    }
    const mine = await this.limits.capsTotal(shardId);
    if (held + mine > budget) {
      throw new NotSuspendableError(
        `this host's budget for suspended shards (${size(budget)}) has ${size(Math.max(0, budget - held))} left; shard ${shardId}'s caps are ${size(mine)}`,
      );
    }
  }

  private async run(
    api: CheckpointApi,
    containers: ContainerMemory,
    shardId: string,
    direction: MoveDirection,
    cause: MoveCause,
  ): Promise<void> {
    const record = this.shards.get(shardId);
    if (record === undefined || !isRunning(record)) return;
    const containerId = record.containerId!;
    const known = this.book.entry(shardId, containerId);
    for (const listener of this.moveListeners) listener(shardId, direction);
    // What each process held on the GPU when it was moved out: kept from the moves before (an
    // agent killed mid-suspend moved some), NVML's listing for those a suspend moves now.
    const held = new Map(known.suspended ?? []);
    const listed = direction === 'suspend' ? this.gpuBytesByPid() : undefined;
    const moving = direction === 'suspend' ? 'SUSPENDING' : 'RESUMING';
    const reports: Promise<void>[] = [];
    const outcome: MoveOutcome = await executeMove(direction, {
      api,
      processes: async () => {
        const current = this.shards.get(shardId);
        if (current?.containerId === undefined) throw new Error('its container is gone');
        return containers.processes(current.containerId);
      },
      mark: async (memory) => {
        // Kept before the first checkpoint: a crash after it finds them.
        if (memory === 'suspended') this.book.keep(shardId, containerId, held);
        await this.limits.setMemory(shardId, memory);
      },
      bytesOf: (pid) => {
        if (listed !== undefined) held.set(pid, listed.get(pid) ?? 0);
        return held.get(pid) ?? 0;
      },
      progress: (completedBytes, totalBytes) => {
        reports.push(
          this.shards.reportMemory(shardId, moving, {
            progress: { completedBytes, ...(totalBytes > 0 ? { totalBytes } : {}) },
          }),
        );
      },
      lockTimeoutMs: LOCK_TIMEOUT_MS,
      ...(direction === 'suspend'
        ? { beforeCheckpoint: () => this.refuseIpcImporters(containers, shardId, containerId) }
        : {}),
    });
    await Promise.all(reports);
    this.metrics.moveSeconds.observe(
      { direction, outcome: outcome.ok ? 'ok' : 'failed' },
      outcome.seconds,
    );
    this.metrics.moves.inc({ direction, cause, outcome: outcome.ok ? 'ok' : 'failed' });
    try {
      await this.ended(containers, shardId, direction, outcome, known, held);
    } finally {
      for (const listener of this.endListeners) listener(shardId, direction, outcome.ok);
    }
  }

  /** Records and tells how a move ended. */
  private async ended(
    containers: ContainerMemory,
    shardId: string,
    direction: MoveDirection,
    outcome: MoveOutcome,
    known: ShardMemory,
    held: ReadonlyMap<number, number>,
  ): Promise<void> {
    if (outcome.ok) {
      known.memory = targetOf(direction);
      known.moved = {
        bytes: outcome.bytes,
        seconds: outcome.seconds,
        processes: outcome.processes,
      };
      if (direction === 'suspend') known.suspended = held;
      else this.book.back(shardId, known);
      this.metrics.movedBytes.inc({ direction }, outcome.bytes);
      await this.shards.reportMemory(shardId, direction === 'suspend' ? 'SUSPENDED' : 'RESUMED', {
        moved: known.moved,
      });
      return;
    }
    const still = this.shards.get(shardId);
    if (still === undefined || !isRunning(still)) {
      // Stopped or deleted meanwhile: its memory went with its processes.
      this.logger.info(
        { shardId, direction, reason: outcome.reason },
        'a move ended with its container',
      );
      return;
    }
    await containers.observe({ shardId, containerId: still.containerId! }).then(
      (memory) => (known.memory = memory),
      () => (known.memory = 'partial'),
    );
    await this.shards.reportMemory(
      shardId,
      direction === 'suspend' ? 'SUSPEND_FAILED' : 'RESUME_FAILED',
      { reason: `${direction} failed: ${outcome.reason}` },
    );
  }

  /** Each process's GPU memory over all GPUs, from NVML's listing (empty where it has none). */
  private gpuBytesByPid(): Map<number, number> {
    const bytes = new Map<number, number>();
    for (const sample of this.gpus.processes() ?? []) {
      bytes.set(sample.pid, (bytes.get(sample.pid) ?? 0) + sample.bytes);
    }
    return bytes;
  }
}

/** A shard whose container runs as far as the agent knows: the only one with memory to move. */
function isRunning(record: Readonly<ShardRecord>): boolean {
  return (
    record.containerId !== undefined &&
    record.state === 'RUNNING' &&
    (record.observed === undefined || record.observed === 'running')
  );
}

function size(value: number): string {
  return formatSize(clampBytes(value));
}
