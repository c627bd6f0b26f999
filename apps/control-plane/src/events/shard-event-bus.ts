import { Injectable, type OnModuleDestroy } from '@nestjs/common';
import type { IdleNotice } from '../compute/idle.model.js';
import type { CapViolation } from '../fence/cap-policy.model.js';
import type { UngovernedCompute } from '../fence/ungoverned-compute.model.js';
import type { ShardRecord } from '../shards/shard-record.js';

/** One change of a shard's state, as subscribers receive it. */
export interface ShardStateChange {
  /** The shard after the change. */
  readonly shard: ShardRecord;
  /** null when the shard was just created. */
  readonly previousState: string | null;
  readonly state: string;
  readonly at: Date;
  /**
   * The stored event's id (shard_event.id, ShardEvent.id), set by recordShardEvents in the
   * transaction that committed the change; undefined until then.
   */
  eventId?: string;
  /**
   * Set on a VIOLATION event: the shard passed its cap on a GPU and its policy was applied
   * (state and previousState are then its state as the control plane has it).
   */
  readonly violation?: CapViolation;
  /**
   * Set on an UNGOVERNED_COMPUTE event: the shard ran GPU work its compute-ledger turns did not
   * govern and its policy was applied (state and previousState are then its state).
   */
  readonly ungovernedCompute?: UngovernedCompute;
  /** Set on an IDLE or IDLE_STOP event: the team's idle policy reported or stopped the shard. */
  readonly idle?: IdleNotice;
}

/**
 * A subscriber that falls this far behind is cut off (its iterator ends) rather than letting
 * the process buffer without bound.
 */
export const MAX_BUFFERED_EVENTS = 10_000;

type Listener<T> = (event: T) => void;

/**
 * Fan-out of shard state changes to GraphQL subscriptions. Services store each change in the
 * transaction that commits it (recordShardEvents, shard-event-store.ts) and publish after it
 * commits; this process's subscribers hear it at once, and what `forwardTo`
 * registered (ShardEventRelay, on PostgreSQL) passes it to the other control-plane replicas,
 * whose relays `deliver` it to their own subscribers.
 */
@Injectable()
export class ShardEventBus implements OnModuleDestroy {
  private readonly listeners = new Set<Listener<ShardStateChange>>();
  private readonly closers = new Set<() => void>();
  private forward: Listener<ShardStateChange> | undefined;
  private readonly countWatchers = new Set<(count: number) => void>();

  /** A change this process committed. */
  publish(event: ShardStateChange): void {
    this.deliver(event);
    this.forward?.(event);
  }

  /** To this process's subscribers only (a change another replica made). */
  deliver(event: ShardStateChange): void {
    for (const listener of this.listeners) listener(event);
  }

  /** Where this process's own changes go besides its subscribers; one destination. */
  forwardTo(forward: Listener<ShardStateChange>): void {
    this.forward = forward;
  }

  /** The events `accept` lets through, from now until the iterator is returned. */
  subscribe(accept: (event: ShardStateChange) => boolean): AsyncIterableIterator<ShardStateChange> {
    const buffered: ShardStateChange[] = [];
    let waiting: ((result: IteratorResult<ShardStateChange>) => void) | undefined;
    let done = false;
    const finish = () => {
      if (done) return;
      done = true;
      this.listeners.delete(listener);
      this.closers.delete(finish);
      this.countChanged();
      buffered.length = 0;
      waiting?.({ value: undefined, done: true });
      waiting = undefined;
    };
    const listener: Listener<ShardStateChange> = (event) => {
      if (!accept(event)) return;
      if (waiting !== undefined) {
        const resolve = waiting;
        waiting = undefined;
        resolve({ value: event, done: false });
      } else if (buffered.length < MAX_BUFFERED_EVENTS) {
        buffered.push(event);
      } else {
        finish();
      }
    };
    this.listeners.add(listener);
    this.closers.add(finish);
    this.countChanged();
    const iterator: AsyncIterableIterator<ShardStateChange> = {
      next: () => {
        const event = buffered.shift();
        if (event !== undefined) return Promise.resolve({ value: event, done: false });
        if (done) return Promise.resolve({ value: undefined, done: true });
        return new Promise((resolve) => {
          waiting = resolve;
        });
      },
      return: () => {
        finish();
        return Promise.resolve({ value: undefined, done: true });
      },
      [Symbol.asyncIterator]: () => iterator,
    };
    return iterator;
  }

  /** Subscribers currently listening (for tests and shutdown). */
  get subscriberCount(): number {
    return this.listeners.size;
  }

  /**
   * Resolves once `holds(subscriberCount)` is true: at once, or when a subscriber comes or
   * goes (so a caller waits on the subscription itself, not on time).
   */
  whenSubscribers(holds: (count: number) => boolean): Promise<void> {
    if (holds(this.listeners.size)) return Promise.resolve();
    return new Promise((resolve) => {
      const watch = (count: number) => {
        if (!holds(count)) return;
        this.countWatchers.delete(watch);
        resolve();
      };
      this.countWatchers.add(watch);
    });
  }

  private countChanged(): void {
    for (const watch of [...this.countWatchers]) watch(this.listeners.size);
  }

  onModuleDestroy(): void {
    for (const close of [...this.closers]) close();
  }
}
