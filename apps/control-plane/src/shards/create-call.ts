/**
 * The vocabulary of a createShard batch, shared by the group commit (`ShardCreator`), the
 * decision on each call (`decideBatch`), the placement on the cached fleet
 * (`CachedFleetPlacer`) and the conditional write (`writePlanned`): a call waiting for or taking
 * part in a batch, what the batch made of it, and a call placed and holding its GPUs. Kept apart
 * so that each of those files can name them without importing the others.
 */
import type { PlacementRequest } from '@gpushards/limits';
import type { Caller } from '../auth/caller.js';
import type { NoCapacityError, QuotaExceededError } from '../errors/domain-errors.js';
import type { PlacementHolds } from '../placement/placement.service.js';
import type { PlannedShard } from './create-statements.js';
import type { ShardRequest } from './shard-input.js';
import type { ShardRecord } from './shard-record.js';

/** A createShard's answer: its shard, and whether an earlier call under its key made it. */
export interface CreatedShard {
  readonly shard: ShardRecord;
  readonly replayed: boolean;
}

/** A createShard waiting for, or taking part in, a batch. */
export interface Pending {
  readonly caller: Caller;
  readonly teamId: string;
  readonly request: ShardRequest;
  /** performance.now() when the call arrived. */
  readonly started: number;
  /** The batches it took part in so far. */
  round: number;
  /** Whether a NO_CAPACITY is final: the fleet was read again after the call arrived. */
  fresh: boolean;
  /** Run in a batch of its own: its last batch failed as a whole. */
  alone: boolean;
  /**
   * Decided under its team's lock taken first: its last batch, decided on a read without the
   * lock, found the team changed under the lock, or failed.
   */
  lockFirst: boolean;
  readonly resolve: (created: CreatedShard) => void;
  readonly reject: (error: unknown) => void;
}

/** What a batch made of one call, before and after its statement ran. */
export type Verdict =
  | { readonly kind: 'replayed'; readonly shard: ShardRecord }
  | { readonly kind: 'failed'; readonly error: unknown }
  /** QUOTA_EXCEEDED or NO_CAPACITY: final unless other calls of the batch lost their GPUs. */
  | { readonly kind: 'refused'; readonly error: QuotaExceededError | NoCapacityError }
  | { readonly kind: 'needs-fresh-fleet' }
  /** Same team and idempotency key as an earlier call of the batch: its answer decides. */
  | { readonly kind: 'follows'; readonly first: Pending }
  | { readonly kind: 'placed'; readonly shard: ShardRecord }
  /** Its GPUs were taken by another transaction first. */
  | { readonly kind: 'lost-race'; readonly hostId: string }
  /** Fits nowhere now but could fit the fleet, or shards already wait: written PENDING. */
  | { readonly kind: 'queued'; readonly reason: string };

/** A call placed on the cached fleet, holding its GPUs there until its batch ends. */
export interface Plan {
  readonly kind: 'planned';
  readonly placementRequest: PlacementRequest;
  readonly shard: PlannedShard;
  readonly holds: PlacementHolds;
}
