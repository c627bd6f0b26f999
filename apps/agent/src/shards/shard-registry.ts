import { Injectable } from '@nestjs/common';
import type { ShardState } from '@gpushards/protocol';

import { KeyedMutex } from '../common/keyed-mutex.js';
import type { MemoryReport, ShardRecord } from './shard-record.js';
import { StateReporter, type StateDetails } from './state-reporter.js';

/**
 * What the agent knows of the shards of this host, and the rules every operation on them
 * follows: one operation at a time per shard (`exclusive`), a state change is recorded and
 * published together (`report`), and the reconcile ordering rule (a reply to a reconcile or
 * register request sent before a shard's last command or state change may not reflect it).
 */
@Injectable()
export class ShardRegistry {
  private readonly records = new Map<string, ShardRecord>();
  private readonly mutex = new KeyedMutex();
  /** Counts commands received and state changes; see commandMark(). */
  private commandCount = 0;
  private readonly lastCommand = new Map<string, number>();
  /** The newest shard version a move (suspend, resume) of each shard was decided at. */
  private readonly newestMove = new Map<string, number>();

  constructor(private readonly reporter: StateReporter) {}

  list(): readonly Readonly<ShardRecord>[] {
    return [...this.records.values()];
  }

  /** The ids of every shard the agent keeps a record of. */
  shardIds(): string[] {
    return [...this.records.keys()];
  }

  get(shardId: string): ShardRecord | undefined {
    return this.records.get(shardId);
  }

  set(record: ShardRecord): void {
    this.records.set(record.shardId, record);
  }

  /** The agent forgets the shard: its record and its place in the ordering rule. */
  forget(shardId: string): void {
    this.records.delete(shardId);
    this.lastCommand.delete(shardId);
    this.newestMove.delete(shardId);
  }

  /**
   * Takes on a move of the shard's memory that the control plane decided at `shardVersion`,
   * unless one decided later was taken on already: false then. A move without a version (from
   * an older control plane) is not ordered. The same version again is a resend of the same
   * decision (the stuck-shard sweeper's), taken on.
   */
  takeMoveOn(shardId: string, shardVersion: number | undefined): boolean {
    if (shardVersion === undefined) return true;
    const newest = this.newestMove.get(shardId);
    if (newest !== undefined && shardVersion < newest) return false;
    this.newestMove.set(shardId, shardVersion);
    return true;
  }

  /** The newest shard version a move of the shard was taken on at, if any. */
  newestMoveOf(shardId: string): number | undefined {
    return this.newestMove.get(shardId);
  }

  /** Runs `task` once no other operation on this shard runs or waits before it. */
  exclusive<T>(shardId: string, task: () => Promise<T>): Promise<T> {
    return this.mutex.run(shardId, task);
  }

  /** Notes that a command for this shard arrived (the reconcile ordering rule). */
  noteCommand(shardId: string): void {
    this.lastCommand.set(shardId, ++this.commandCount);
  }

  /** A mark to take before sending a reconcile or register request. */
  commandMark(): number {
    return this.commandCount;
  }

  /** Shards that received a command after `mark`: a reply to a request sent at `mark` may predate it. */
  commandedSince(mark: number): Set<string> {
    return new Set([...this.lastCommand].filter(([, at]) => at > mark).map(([shardId]) => shardId));
  }

  /** Records the shard's new state and publishes it. */
  async report(record: ShardRecord, state: ShardState, details: StateDetails = {}): Promise<void> {
    record.state = state;
    // A reconcile reply to a request sent before this change may not reflect it.
    this.noteCommand(record.shardId);
    await this.reporter.report(record.shardId, record.teamId, state, details);
  }

  /**
   * Publishes where the shard's GPU memory is going or went (SUSPENDING … RESUME_FAILED). The
   * record's state stays what its container is (RUNNING): the container runs throughout.
   */
  async reportMemory(
    record: ShardRecord,
    state: MemoryReport,
    details: StateDetails = {},
  ): Promise<void> {
    this.noteCommand(record.shardId);
    await this.reporter.report(record.shardId, record.teamId, state, details);
  }

  async fail(record: ShardRecord, reason: string): Promise<void> {
    await this.report(record, 'FAILED', { reason });
  }
}
