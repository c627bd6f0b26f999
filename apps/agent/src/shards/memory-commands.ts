import { Injectable } from '@nestjs/common';
import type { MemoryResidency, SuspendCommand } from '@gpushards/protocol';

import { NotSuspendableError, StaleCommandError } from './shard-record.js';
import { ShardRegistry } from './shard-registry.js';

/** What moves a shard's GPU memory (MemoryService, in the memory module). */
export interface MemoryMover {
  /** Takes the suspend on; resolves to where the memory was (docs/elastic.md, "The protocol"). */
  suspend(shardId: string, cause: SuspendCommand['cause']): Promise<MemoryResidency>;
  resume(shardId: string): Promise<MemoryResidency>;
}

/**
 * The control plane's suspend and resume commands, passed from the command handlers to the
 * memory module, which imports this one (the shards it moves) and serves them here. Until it
 * does, nothing here suspends: NOT_SUSPENDABLE. A move older (by the shard version it was
 * decided at) than one already taken on is refused: STALE_COMMAND.
 */
@Injectable()
export class MemoryCommands {
  private mover: MemoryMover | undefined;

  constructor(private readonly registry: ShardRegistry) {}

  serve(mover: MemoryMover): void {
    this.mover = mover;
  }

  suspend(
    shardId: string,
    cause: SuspendCommand['cause'],
    shardVersion?: number,
  ): Promise<MemoryResidency> {
    const mover = this.served();
    this.takeOn(shardId, 'suspend', shardVersion);
    return mover.suspend(shardId, cause);
  }

  resume(shardId: string, shardVersion?: number): Promise<MemoryResidency> {
    const mover = this.served();
    this.takeOn(shardId, 'resume', shardVersion);
    return mover.resume(shardId);
  }

  private takeOn(shardId: string, move: 'suspend' | 'resume', shardVersion?: number): void {
    if (this.registry.takeMoveOn(shardId, shardVersion)) return;
    throw new StaleCommandError(
      `this ${move} of shard ${shardId} was decided at its version ${shardVersion}, before the ` +
        `move decided at version ${this.registry.newestMoveOf(shardId)} that this agent already ` +
        'took on: refused, so that a late copy does not undo the newer move',
    );
  }

  private served(): MemoryMover {
    if (this.mover === undefined)
      throw new NotSuspendableError('this agent does not suspend shards');
    return this.mover;
  }
}
