/**
 * The pending queue kept between admission passes, so that a pass after one freeing event does
 * not sort, walk and describe 10,000 waiting shards again. `admit` decides the same plan as
 * admit() over the same shards (the property tests hold it to admitWholePass over random runs
 * of events: shards entering, placed, cancelled, expiring, teams' policies and usage changing).
 *
 * What it keeps, and why that is enough:
 * - The shards in queue order. compareQueued orders by class, then by the teams' fair share,
 *   then arrival and id: only the fair-share step depends on what a pass reads (the teams'
 *   decayed usage and guarantees), and only through which team comes before which. A pass
 *   works out that order of the queued teams (a few, not the queue); while it is the same, the
 *   kept order is the order admit() would sort, and shards that entered or left since are put
 *   in or taken out by binary search. Otherwise (or after many changes) it sorts again.
 * - Per shard, its waiting entry for when it only waits for capacity (Waiting carries no
 *   position, so the entry does not change as shards ahead of it are placed). Once a pass finds
 *   that nothing fits and nothing can be suspended, and no shard of the queue can do more than
 *   wait then (no team with a limit or guarantee, no non-preemptible, requeued or reclaiming
 *   shard), the rest of the plan's waiting list is these entries, copied.
 * - What a pass needs of the whole queue before it starts: the count of shards per size (the
 *   bound past which nothing fits), the shards that expire, the requeued ones (reclaimedFor).
 *
 * The caller says what changed (put, remove) or gives the queue whole (reset); it stays as
 * correct as what it is told: the control plane's commit still checks each placed shard is
 * PENDING (docs/architecture.md, "The queue").
 */
import { compareText } from '../placement-rules.js';
import { admit, type AdmissionInput, type AdmissionPlan, type Waiting } from './admission.js';
import { decideInOrder } from './admission-order.js';
import { CAPACITY, NeedsLeft, shardOnlyWaits, teamOnlyWaits } from './admission-steps.js';
import { compareFairShare } from './fair-share.js';
import {
  compareQueued,
  fairShareOf,
  teamsById,
  type PendingShard,
  type QueueTeam,
} from './model.js';

/** More changes than this since the last pass: sorting again costs less than inserting each. */
const MAX_CHANGES_KEPT = 256;

export interface QueuedAdmissionInput extends Omit<AdmissionInput, 'pending'> {
  /** Shards whose victims are already stopping: reclaimInFlight in this pass. */
  readonly reclaimsInFlight?: { has(shardId: string): boolean; readonly size: number };
  /** SUSPENDED shards whose resume is wanted (`resume` set), taken with the queue. */
  readonly resumes?: readonly PendingShard[];
}

interface Entry {
  readonly shard: PendingShard;
  /** Its place in `waiting` while it only waits for capacity: one object, pass after pass. */
  readonly capacityWait: Waiting;
}

export class AdmissionQueue {
  private readonly entries = new Map<string, Entry>();
  /** In queue order as of the last pass (`order`), without the changes since. */
  private shardsInOrder: PendingShard[] = [];
  /** Their capacity entries, index for index. */
  private waitsInOrder: Waiting[] = [];
  /** The order of the queued teams the kept order was made for; undefined: sort again. */
  private order: string | undefined;
  private added: Entry[] = [];
  private removed: Entry[] = [];
  /** Shards per bytesPerGpu. */
  private readonly sizes = new Map<number, number>();
  /** Shards per team. */
  private readonly teams = new Map<string, number>();
  /** Shards with an expiry. */
  private readonly expiring = new Set<Entry>();
  /** Shards that may do more than wait for capacity whatever their team (shardOnlyWaits). */
  private readonly deciding = new Set<Entry>();
  /** Requeued shards (reclaimedFor set). */
  private readonly requeued = new Set<Entry>();

  get size(): number {
    return this.entries.size;
  }

  has(shardId: string): boolean {
    return this.entries.has(shardId);
  }

  /** Some shard of this team waits. */
  hasShardOf(teamId: string): boolean {
    return this.teams.has(teamId);
  }

  /** The queue is exactly these shards (a whole read). */
  reset(shards: readonly PendingShard[]): void {
    this.entries.clear();
    this.shardsInOrder = [];
    this.waitsInOrder = [];
    this.order = undefined;
    this.added = [];
    this.removed = [];
    this.sizes.clear();
    this.teams.clear();
    this.expiring.clear();
    this.deciding.clear();
    this.requeued.clear();
    this.put(shards);
  }

  /** Shards that wait, read again: added, or in place of the entry of the same id. */
  put(shards: readonly PendingShard[]): void {
    for (const shard of shards) {
      this.drop(shard.id);
      const entry: Entry = { shard, capacityWait: { shardId: shard.id, reason: CAPACITY } };
      this.entries.set(shard.id, entry);
      this.added.push(entry);
      count(this.sizes, shard.request.bytesPerGpu, 1);
      count(this.teams, shard.teamId, 1);
      if (shard.expiresAt !== undefined) this.expiring.add(entry);
      if (!shardOnlyWaits(shard)) this.deciding.add(entry);
      if (shard.reclaimedFor !== undefined) this.requeued.add(entry);
    }
  }

  /** Shards that left the queue. */
  remove(shardIds: Iterable<string>): void {
    for (const id of shardIds) this.drop(id);
  }

  /** The queued shards, in the order of the last pass (those that entered since at the end). */
  shards(): PendingShard[] {
    const kept =
      this.removed.length === 0
        ? this.shardsInOrder.slice()
        : this.shardsInOrder.filter((shard) => this.entries.get(shard.id)?.shard === shard);
    for (const entry of this.added) {
      if (this.entries.get(entry.shard.id) === entry) kept.push(entry.shard);
    }
    return kept;
  }

  /**
   * The pass over the queue: the plan admit() decides for these shards (with `reclaimsInFlight`
   * marked and `resumes` added).
   */
  admit(input: QueuedAdmissionInput): AdmissionPlan {
    const { reclaimsInFlight, resumes = [], ...rest } = input;
    const teams = teamsById(input.teams);
    const order = teamOrderOf(this.teams.keys(), teams);
    if (resumes.length > 0 || order === undefined) {
      // A resume's place is not kept (they are read with every pass), nor an order where a
      // team's usage is not a number: the list, whole.
      const pending = this.shards().map((shard) =>
        reclaimsInFlight?.has(shard.id) === true ? { ...shard, reclaimInFlight: true } : shard,
      );
      return admit({ ...rest, pending: pending.concat(resumes) });
    }
    this.bringInOrder(order, teams);
    let shards: readonly PendingShard[] = this.shardsInOrder;
    let waits: readonly Waiting[] = this.waitsInOrder;
    const needs = new Map(this.sizes);
    const expired: string[] = [];
    for (const { shard } of this.expiring) {
      if (shard.expiresAt! <= input.now) {
        expired.push(shard.id);
        count(needs, shard.request.bytesPerGpu, -1);
      }
    }
    if (expired.length > 0) {
      expired.sort();
      const gone = new Set(expired);
      const keep = shards.map((shard) => !gone.has(shard.id));
      shards = shards.filter((_, i) => keep[i]);
      waits = waits.filter((_, i) => keep[i]);
    }
    let marked = false;
    if (reclaimsInFlight !== undefined && reclaimsInFlight.size > 0) {
      const copy = shards.map((shard) =>
        reclaimsInFlight.has(shard.id) ? { ...shard, reclaimInFlight: true } : shard,
      );
      marked = copy.some((shard, i) => shard !== shards[i]);
      shards = copy;
    }
    const onlyWait =
      !marked &&
      this.deciding.size === 0 &&
      [...this.teams.keys()].every((teamId) => teamOnlyWaits(teams.get(teamId)));
    return decideInOrder(
      rest,
      teams,
      {
        shards,
        needs: NeedsLeft.fromCounts(needs),
        reclaimersWaiting: this.reclaimersWaiting(input.now),
        resumeHosts: new Set(),
        ...(onlyWait ? { capacityWaits: waits } : {}),
      },
      expired,
      false,
    );
  }

  private drop(shardId: string): void {
    const entry = this.entries.get(shardId);
    if (entry === undefined) return;
    this.entries.delete(shardId);
    this.removed.push(entry);
    count(this.sizes, entry.shard.request.bytesPerGpu, -1);
    count(this.teams, entry.shard.teamId, -1);
    this.expiring.delete(entry);
    this.deciding.delete(entry);
    this.requeued.delete(entry);
  }

  /** The kept order made the order of this pass: changes put in, or sorted again. */
  private bringInOrder(order: string, teams: ReadonlyMap<string, QueueTeam>): void {
    const compare = (a: PendingShard, b: PendingShard) => compareQueued(a, b, teams);
    const changes = this.added.length + this.removed.length;
    if (this.order === order && changes <= MAX_CHANGES_KEPT && this.applyChanges(compare)) {
      this.added = [];
      this.removed = [];
      return;
    }
    const shards = [...this.entries.values()].map((entry) => entry.shard).sort(compare);
    this.shardsInOrder = shards;
    this.waitsInOrder = shards.map((shard) => this.entries.get(shard.id)!.capacityWait);
    this.order = order;
    this.added = [];
    this.removed = [];
  }

  /** False when an entry was not where the order says (then the caller sorts again). */
  private applyChanges(compare: (a: PendingShard, b: PendingShard) => number): boolean {
    const shards = this.shardsInOrder;
    const waits = this.waitsInOrder;
    const fresh = new Set(this.added);
    for (const entry of this.removed) {
      if (fresh.has(entry)) continue; // put and removed since the last pass: never placed
      const at = searchIn(shards, entry.shard, compare);
      if (shards[at] !== entry.shard) return false;
      shards.splice(at, 1);
      waits.splice(at, 1);
    }
    for (const entry of this.added) {
      if (this.entries.get(entry.shard.id) !== entry) continue;
      const at = searchIn(shards, entry.shard, compare);
      shards.splice(at, 0, entry.shard);
      waits.splice(at, 0, entry.capacityWait);
    }
    return true;
  }

  /** reclaimersWaitingIn over the shards not expired at `now`, from the requeued ones alone. */
  private reclaimersWaiting(now: number): Set<string> {
    const live = (entry: Entry | undefined) =>
      entry !== undefined && !(entry.shard.expiresAt !== undefined && entry.shard.expiresAt <= now);
    const waiting = new Set<string>();
    for (const entry of this.requeued) {
      if (!live(entry)) continue;
      const target = entry.shard.reclaimedFor!;
      if (live(this.entries.get(target))) waiting.add(target);
    }
    return waiting;
  }
}

/** The first index whose shard does not come before `shard`. */
function searchIn(
  shards: readonly PendingShard[],
  shard: PendingShard,
  compare: (a: PendingShard, b: PendingShard) => number,
): number {
  let low = 0;
  let high = shards.length;
  while (low < high) {
    const mid = (low + high) >>> 1;
    if (compare(shards[mid]!, shard) < 0) low = mid + 1;
    else high = mid;
  }
  return low;
}

/**
 * Which of these teams comes before which in the queue order (compareQueued's fair-share step),
 * as a string: equal strings, equal answers for every two teams. Undefined when a team's key is
 * not a number (no order to keep).
 */
function teamOrderOf(
  teamIds: Iterable<string>,
  teams: ReadonlyMap<string, QueueTeam>,
): string | undefined {
  const keyed = [...teamIds].map((id) => ({ id, key: fairShareOf(teams.get(id)) }));
  if (keyed.some(({ key }) => Number.isNaN(key.ratio) || Number.isNaN(key.decayedGiBHours))) {
    return undefined;
  }
  keyed.sort((a, b) => compareFairShare(a.key, b.key) || compareText(a.id, b.id));
  let order = '';
  keyed.forEach(({ id, key }, i) => {
    if (i > 0) order += compareFairShare(keyed[i - 1]!.key, key) === 0 ? '\u0001' : '\u0002';
    order += id;
  });
  return order;
}

function count<K>(counts: Map<K, number>, key: K, delta: number): void {
  const n = (counts.get(key) ?? 0) + delta;
  if (n === 0) counts.delete(key);
  else counts.set(key, n);
}
