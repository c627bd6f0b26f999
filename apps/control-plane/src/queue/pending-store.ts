/**
 * The admitter's copy of the PENDING shards, so that a pass after one freeing event costs a
 * decision over memory and one conditional commit, not a read of the whole queue. The copy is a
 * libs/limits AdmissionQueue: the shards in queue order, kept between passes, so that the pass
 * neither sorts nor describes again the thousands that only wait for capacity.
 *
 * Read whole when this replica becomes the admitter and every WHOLE_READ_INTERVAL_MS after (the
 * backstop for a follower's message that never came); between, only the shards named by a
 * commit of this process or a follower's message are read again, by id. A shard that leaves the
 * queue is dropped at once and read again anyway: a read by id that was under way when it left
 * may have brought it back, and the second read removes it. Whatever the copy says, the pass's
 * commit checks each shard is still PENDING (applyPlacements), so a stale entry costs a
 * placement that is not written, never a shard placed twice.
 */
import { AdmissionQueue, type PriorityClasses } from '@gpushards/limits';
import type { RawSql } from '../database/index.js';
import { readPending } from './queue-reads.js';

type Reader = Pick<RawSql, '$queryRaw'>;

/** The copy is read whole at least this often. */
export const WHOLE_READ_INTERVAL_MS = 30_000;

export class PendingStore {
  private readonly queue = new AdmissionQueue();
  private dirty = new Set<string>();
  private loadedAt: number | undefined;
  /** Raised by invalidate: a whole read under way when it was called does not count. */
  private generation = 0;

  /** The next sync reads the queue whole (this replica just became the admitter, or stopped). */
  invalidate(): void {
    this.loadedAt = undefined;
    this.generation++;
    this.queue.reset([]);
    this.dirty.clear();
  }

  /** Shards that became PENDING: read at the next sync. */
  entered(ids: readonly string[]): void {
    for (const id of ids) this.dirty.add(id);
  }

  /** Shards that left the queue, by a commit elsewhere: dropped now, read again at the next sync. */
  left(ids: readonly string[]): void {
    this.queue.remove(ids);
    for (const id of ids) this.dirty.add(id);
  }

  /** Shards this process's committed pass placed or expired: their state is known. */
  settled(ids: readonly string[]): void {
    this.queue.remove(ids);
    for (const id of ids) this.dirty.delete(id);
  }

  /**
   * Brings the copy up to date (whole or by id) and returns it; a whole read that an invalidate
   * overtook is returned on its own, not kept.
   */
  async sync(reader: Reader, classes: PriorityClasses): Promise<AdmissionQueue> {
    const now = performance.now();
    if (this.loadedAt === undefined || now - this.loadedAt >= WHOLE_READ_INTERVAL_MS) {
      // Ids named from here on stay dirty: the read may or may not see their commit.
      this.dirty = new Set();
      const generation = this.generation;
      const all = await readPending(reader, classes);
      if (generation !== this.generation) {
        const overtaken = new AdmissionQueue();
        overtaken.reset(all);
        return overtaken;
      }
      this.queue.reset(all);
      this.loadedAt = now;
    } else if (this.dirty.size > 0) {
      const ids = [...this.dirty];
      this.dirty = new Set();
      this.queue.remove(ids);
      this.queue.put(await readPending(reader, classes, ids));
    }
    return this.queue;
  }
}
