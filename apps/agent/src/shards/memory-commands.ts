import { Injectable } from '@nestjs/common';
import type { MemoryResidency, SuspendCommand } from '@gpushards/protocol';

import { NotSuspendableError } from './shard-record.js';

/** What moves a shard's GPU memory (MemoryService, in the memory module). */
export interface MemoryMover {
  /** Takes the suspend on; resolves to where the memory was (docs/elastic.md, "The protocol"). */
  suspend(shardId: string, cause: SuspendCommand['cause']): Promise<MemoryResidency>;
  resume(shardId: string): Promise<MemoryResidency>;
}

/**
 * The control plane's suspend and resume commands, passed from the command handlers to the
 * memory module, which imports this one (the shards it moves) and serves them here. Until it
 * does, nothing here suspends: NOT_SUSPENDABLE.
 */
@Injectable()
export class MemoryCommands {
  private mover: MemoryMover | undefined;

  serve(mover: MemoryMover): void {
    this.mover = mover;
  }

  suspend(shardId: string, cause: SuspendCommand['cause']): Promise<MemoryResidency> {
    return this.served().suspend(shardId, cause);
  }

  resume(shardId: string): Promise<MemoryResidency> {
    return this.served().resume(shardId);
  }

  private served(): MemoryMover {
    if (this.mover === undefined)
      throw new NotSuspendableError('this agent does not suspend shards');
    return this.mover;
  }
}
