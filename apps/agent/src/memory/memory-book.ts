import type { MoveDirection, ObservedMemory } from '@gpushards/limits';

import type { Logger } from '../logging/logger.js';
import { SuspendedBytesStore } from './suspended-bytes.js';

/** What the agent knows of one running shard's memory: of one container of it. */
export interface ShardMemory {
  /** The container whose processes hold it: a new container of the shard starts afresh. */
  readonly containerId: string;
  /** Where it was last seen (an observation, or the end of a move). */
  memory: ObservedMemory;
  /** The move asked for last, running or waiting behind the one before it. */
  move?: { readonly direction: MoveDirection; readonly done: Promise<void> };
  /**
   * GPU bytes each process held when a suspend moved it (a resume's progress), as kept in the
   * state folder: an agent started after a crash knows them too.
   */
  suspended?: ReadonlyMap<number, number>;
  /** What the last finished move took, told again to a repeated command. */
  moved?: { bytes: number; seconds: number; processes: number };
}

/**
 * The agent's book of where each running shard's memory is (MemoryService's): one entry per
 * shard, for one container of it, with what its suspended processes held on the GPU kept in the
 * state folder (SuspendedBytesStore).
 */
export class MemoryBook {
  private readonly entries = new Map<string, ShardMemory>();

  constructor(
    private readonly store: SuspendedBytesStore,
    /** The container of the shard when it runs as far as the agent knows, else undefined. */
    private readonly runningContainer: (shardId: string) => string | undefined,
    private readonly logger: Logger,
  ) {}

  /** The shard's entry for this container: a fresh one (resident) for a container it did not know. */
  entry(shardId: string, containerId: string): ShardMemory {
    let known = this.entries.get(shardId);
    if (known === undefined || known.containerId !== containerId) {
      const suspended = this.store.read(shardId, containerId);
      known = { containerId, memory: 'resident', ...(suspended ? { suspended } : {}) };
      this.entries.set(shardId, known);
    }
    return known;
  }

  /** The shard's entry, when it is of this container. */
  of(shardId: string, containerId: string | undefined): ShardMemory | undefined {
    const known = this.entries.get(shardId);
    return known !== undefined && known.containerId === containerId ? known : undefined;
  }

  moving(shardId: string): MoveDirection | undefined {
    return this.entries.get(shardId)?.move?.direction;
  }

  /**
   * The entries of shards whose containers run, or whose move runs: a container that exited
   * took its memory with its processes, from that moment (the next reading forgets it), so it
   * holds nothing of the budget or of host RAM.
   */
  live(): [string, ShardMemory][] {
    return [...this.entries].filter(
      ([shardId, known]) =>
        known.move !== undefined || known.containerId === this.runningContainer(shardId),
    );
  }

  /** Forgets the shards not `running` and not moving; what was kept of a deleted one too. */
  forgetAllBut(running: ReadonlySet<string>, deleted: (shardId: string) => boolean): void {
    for (const [shardId, known] of this.entries) {
      if (running.has(shardId) || known.move !== undefined) continue;
      this.entries.delete(shardId);
      if (deleted(shardId)) this.store.remove(shardId);
    }
  }

  /** Keeps what the processes held; a failure is logged: the move goes on without it. */
  keep(shardId: string, containerId: string, held: ReadonlyMap<number, number>): void {
    try {
      this.store.write(shardId, containerId, held);
    } catch (error) {
      this.logger.warn({ err: error, shardId }, 'cannot keep what its processes held on the GPU');
    }
  }

  /** The memory is back on the GPU: nothing of it is in host RAM. */
  back(shardId: string, known: ShardMemory): void {
    delete known.suspended;
    this.store.remove(shardId);
  }

  /** GPU memory of the live shards held in host RAM, and how many are suspended or partial. */
  totals(): { bytes: number; suspended: number; partial: number } {
    const totals = { bytes: 0, suspended: 0, partial: 0 };
    for (const [, known] of this.live()) {
      if (known.memory === 'resident') continue;
      totals[known.memory]++;
      if (known.suspended) totals.bytes += sumOf(known.suspended);
    }
    return totals;
  }
}

export function sumOf(bytes: ReadonlyMap<number, number>): number {
  let total = 0;
  for (const value of bytes.values()) total += value;
  return total;
}
