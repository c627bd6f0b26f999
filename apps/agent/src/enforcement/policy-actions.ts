import { errorMessage } from '@gpushards/protocol';

import type { ShardsService } from '../shards/shards.service.js';

/** A PID stays "dying" this long after its SIGKILL at most (the driver frees at exit). */
const DYING_MS = 10_000;

/** What one action did: the processes actually signalled, and why it failed if it did. */
export interface ActionOutcome {
  readonly killedPids: readonly number[];
  readonly error?: string;
}

/**
 * What the host's fences do under a shard's cap policy, and what they remember between passes:
 * SIGKILL processes (each then "dying" until it is gone from the samples, or 10 s), or stop the
 * shard once (until a pass no longer finds it). The memory fence (EnforcementService) and the
 * compute fence (ComputeFenceService) each keep one: a process killed by one is not judged
 * dying by the other.
 */
export class PolicyActions {
  /** PID → when it was sent SIGKILL. */
  private readonly dying = new Map<number, number>();
  /** Shards being stopped. */
  private readonly stopping = new Set<string>();

  constructor(private readonly shards: Pick<ShardsService, 'stop'>) {}

  /** The PIDs killed and not yet gone: a decision must not choose them again. */
  dyingPids(): Set<number> {
    return new Set(this.dying.keys());
  }

  get anyDying(): boolean {
    return this.dying.size > 0;
  }

  /** Forgets the killed PIDs a pass no longer sees, and those killed more than 10 s ago. */
  forgetGone(now: number, stillSeen: (pid: number) => boolean): void {
    for (const [pid, at] of this.dying) {
      if (now - at > DYING_MS || !stillSeen(pid)) this.dying.delete(pid);
    }
  }

  /** Forgets the stops of shards a pass no longer finds: a later finding stops them again. */
  keepStopping(found: ReadonlySet<string>): void {
    for (const shardId of this.stopping) if (!found.has(shardId)) this.stopping.delete(shardId);
  }

  /** SIGKILLs each PID; one that ended on its own meanwhile (ESRCH) is no failure. */
  kill(pids: readonly number[], now: number): ActionOutcome {
    const killed: number[] = [];
    let error: string | undefined;
    for (const pid of pids) {
      try {
        process.kill(pid, 'SIGKILL');
        killed.push(pid);
        this.dying.set(pid, now);
      } catch (failure) {
        if ((failure as NodeJS.ErrnoException).code !== 'ESRCH') error = errorMessage(failure);
      }
    }
    return { killedPids: killed, ...(error ? { error } : {}) };
  }

  /** Stops the shard (grace 0); undefined when a stop of it is already under way. */
  async stopOnce(shardId: string): Promise<ActionOutcome | undefined> {
    if (this.stopping.has(shardId)) return undefined;
    this.stopping.add(shardId);
    try {
      await this.shards.stop(shardId, 0);
      return { killedPids: [] };
    } catch (failure) {
      this.stopping.delete(shardId);
      return { killedPids: [], error: errorMessage(failure) };
    }
  }
}
