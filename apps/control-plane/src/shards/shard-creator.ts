import { withinQuotaLimits } from '@gpushards/limits';
import { Inject, Injectable } from '@nestjs/common';
import { performance } from 'node:perf_hooks';
import type { Caller } from '../auth/caller.js';
import {
  isDatabaseBusy,
  isUniqueViolation,
  postgresErrorCode,
  PrismaService,
  type RawSql,
} from '../database/index.js';
import { ConflictError, NoCapacityError, QuotaExceededError } from '../errors/domain-errors.js';
import { recordShardEvents } from '../events/shard-event-store.js';
import { LOGGER, type Logger } from '../logging/logger.js';
import { FleetCache } from '../placement/fleet-cache.js';
import { QueueSignal } from '../placement/queue-signal.js';
import { PlacementMetrics, type PlacementOutcome } from '../placement/placement-metrics.js';
import { PlacementService } from '../placement/placement.service.js';
import { CachedFleetPlacer } from './cached-fleet-placer.js';
import type { CreatedShard, Pending, Plan, Verdict } from './create-call.js';
import { decideBatch, nonPreemptibleTeamsOf } from './create-decision.js';
import { findByIdempotencyKeys } from './create-statements.js';
import { writePlanned, writeQueued } from './create-writes.js';
import { replayOf } from './idempotency.js';
import { CommitEffects, ShardLifecycle } from './shard-lifecycle.js';
import type { ShardRequest } from './shard-input.js';
import type { ShardRecord } from './shard-record.js';
import {
  lockTeamStatesLate,
  quotaPolicyOf,
  readTeamStates,
  sameTerms,
  usageOf,
  type TeamState,
} from './team-quota.js';

/**
 * Batches a createShard may take part in before it is answered anyway: a request goes round
 * again after its GPUs were taken by another control plane first, after a NO_CAPACITY on the
 * cached fleet (to be decided on a fresh read), after a deadlock, or after its batch failed as
 * a whole (it then runs alone, to get an answer of its own).
 */
const MAX_ROUNDS = 4;

/** The most createShard calls one transaction writes. */
const MAX_BATCH = 256;

/**
 * Waiting for a pooled connection, and the whole transaction. Generous: a batch waits behind
 * other control planes' batches for its teams' locks.
 */
const TRANSACTION_OPTIONS = { maxWait: 10_000, timeout: 20_000 };

/**
 * PostgreSQL's deadlock and serialization failures, and a transaction that could not start
 * for want of a connection (an overloaded box): the batch may simply run again.
 */
function isTransient(error: unknown): boolean {
  const code = postgresErrorCode(error);
  return code === '40P01' || code === '40001' || isDatabaseBusy(error);
}

/**
 * createShard's transactions, one batch at a time per process (group commit): calls that
 * arrive while a batch runs wait and go together in the next one. A batch is one transaction
 * of a few statements whatever its size: BEGIN, the teams' quota and usage read, (the
 * idempotency keys,) the conditional reservation with every shard, reservation and audit row
 * (`writeBatch`), the shard events, the teams' locks with their usage read again and checked
 * (`checkTeamsLate`), COMMIT. Within a batch the calls are decided in arrival order, each
 * seeing what the earlier ones reserved and held, exactly as if they had run one after
 * another. The team locks serialize against other control planes and resizes, but only for
 * the last statement and COMMIT; a batch whose team changed in a way that matters meanwhile
 * is decided again with the locks taken first, as every batch was before.
 *
 * One batch at a time keeps the pool free for everything else and makes the fleet cache's
 * held bytes exactly those of the running batch, so a NO_CAPACITY decided on it is as true as
 * one decided on a fresh read plus this transaction's own picks.
 *
 * This class is the batching: forming batches, running their transaction, answering each call
 * or sending it round again. The rules each call is decided by are in create-decision.ts, the
 * writes in create-writes.ts.
 */
@Injectable()
export class ShardCreator {
  private readonly logger: Logger;
  private readonly queue: Pending[] = [];
  private draining = false;
  private readonly placer: CachedFleetPlacer;

  constructor(
    private readonly prisma: PrismaService,
    placement: PlacementService,
    private readonly cache: FleetCache,
    private readonly lifecycle: ShardLifecycle,
    private readonly metrics: PlacementMetrics,
    queueSignal: QueueSignal,
    @Inject(LOGGER) logger: Logger,
  ) {
    this.logger = logger.child({ module: 'shards' });
    this.placer = new CachedFleetPlacer(placement, cache, queueSignal);
  }

  /** Creates the (validated) shard for the team, or throws why not. */
  create(
    caller: Caller,
    teamId: string,
    request: ShardRequest,
    started: number,
  ): Promise<CreatedShard> {
    return new Promise((resolve, reject) => {
      const answer = (outcome: PlacementOutcome): void =>
        this.metrics.observe(outcome, (performance.now() - started) / 1000);
      this.enqueue({
        caller,
        teamId,
        request,
        started,
        round: 0,
        fresh: false,
        alone: false,
        lockFirst: false,
        resolve: (created) => {
          answer(created.replayed ? 'replayed' : 'placed');
          resolve(created);
        },
        reject: (error) => {
          answer(
            error instanceof QuotaExceededError
              ? 'quota_exceeded'
              : error instanceof NoCapacityError
                ? 'no_capacity'
                : 'error',
          );
          reject(error);
        },
      });
    });
  }

  private enqueue(pending: Pending): void {
    this.queue.push(pending);
    if (this.draining) return;
    this.draining = true;
    // Calls parsed in the same turn of the event loop make one batch.
    setImmediate(() => void this.drain());
  }

  private async drain(): Promise<void> {
    while (this.queue.length > 0) {
      const batch = this.queue.splice(0, this.queue[0]!.alone ? 1 : takeable(this.queue));
      try {
        await this.run(batch);
      } catch (error) {
        this.logger.error({ err: error }, 'createShard batch failed unexpectedly');
        for (const pending of batch) pending.reject(error);
      }
    }
    this.draining = false;
  }

  /** Runs one batch and answers (or sends round again) each of its calls. Never throws. */
  private async run(batch: Pending[]): Promise<void> {
    for (const pending of batch) pending.round++;
    const verdicts = new Map<Pending, Verdict>();
    const plans = new Map<Pending, Plan>();
    const effects = new CommitEffects();
    let lostRaces = false;
    try {
      await this.prisma.direct.transaction(async (tx) => {
        const teamIds = [...new Set(batch.map((pending) => pending.teamId))];
        const covered = nonPreemptibleTeamsOf(batch);
        // Teams' locks last (only to commit) unless a call must have them first: a class
        // checked against its team's guarantee, or a call whose last batch found its team
        // changed (or failed). See checkTeamsLate.
        const lockFirst = covered.length > 0 || batch.some((pending) => pending.lockFirst);
        const teams = await readTeamStates(tx, teamIds, covered, {
          lockAndFold: lockFirst,
          genericPlans: true,
        });
        const existing = await findByIdempotencyKeys(tx, idempotencyKeysOf(batch));
        decideBatch(batch, teams, existing, this.placer, verdicts, plans);
        lostRaces = await writePlanned(tx, plans, verdicts, effects, this.placer);
        await writeQueued(tx, batch, verdicts, effects);
        await recordShardEvents(tx, effects.changes);
        if (!lockFirst) await checkTeamsLate(tx, teams, teamsAddedTo(batch, verdicts));
      }, TRANSACTION_OPTIONS);
    } catch (error) {
      for (const { holds } of plans.values()) holds.settle(false);
      this.failed(batch, error);
      return;
    }
    for (const [pending, { holds }] of plans) {
      holds.settle(verdicts.get(pending)?.kind === 'placed');
    }
    this.lifecycle.afterCommit(effects);
    await this.answer(batch, verdicts, lostRaces);
  }

  /** Answers each call of a committed batch, or sends it round again. */
  private async answer(
    batch: readonly Pending[],
    verdicts: ReadonlyMap<Pending, Verdict>,
    lostRaces: boolean,
  ): Promise<void> {
    const lostHosts = new Set<string>();
    for (const verdict of verdicts.values()) {
      if (verdict.kind === 'lost-race') lostHosts.add(verdict.hostId);
    }
    // Another control plane changed these hosts: read them before the losers go again.
    await this.cache.reloadHosts(this.prisma, [...lostHosts]).catch((error: unknown) => {
      this.logger.warn({ err: error, hostIds: [...lostHosts] }, 'could not read hosts again');
    });
    for (const pending of batch) {
      const verdict = verdicts.get(pending);
      switch (verdict?.kind) {
        case 'placed':
          this.logger.debug(
            {
              shardId: verdict.shard.id,
              teamId: pending.teamId,
              hostId: verdict.shard.hostId,
              actorTokenId: pending.caller.tokenId,
            },
            'shard placed',
          );
          pending.resolve({ shard: verdict.shard, replayed: false });
          break;
        case 'replayed':
          pending.resolve({ shard: verdict.shard, replayed: true });
          break;
        case 'failed':
          pending.reject(verdict.error);
          break;
        case 'refused':
          // A refusal counted GPUs and quota that calls which then lost their race held.
          if (lostRaces) this.again(pending, verdict.error);
          else pending.reject(verdict.error);
          break;
        case 'needs-fresh-fleet':
          this.cache.refreshedSince(pending.started).then(() => {
            pending.fresh = true;
            this.enqueue(pending);
          }, pending.reject);
          break;
        case 'follows': {
          const first = verdicts.get(verdict.first);
          if (first?.kind === 'placed' || first?.kind === 'replayed') {
            this.replay(pending, first.shard);
          } else {
            this.again(pending, raceLostError());
          }
          break;
        }
        case 'lost-race':
          this.again(pending, raceLostError());
          break;
        case 'queued':
        case undefined:
          pending.reject(new Error('createShard: the batch left a call undecided'));
          break;
        default:
          unreachable(verdict);
      }
    }
  }

  /** A batch that did not commit: deadlocks go again; other failures are retried alone. */
  private failed(batch: readonly Pending[], error: unknown): void {
    // Whatever failed, the next batch takes the teams' locks first (no stale read again).
    for (const pending of batch) pending.lockFirst = true;
    if (error instanceof TeamChanged) {
      // Decided on a read the team's lock then contradicted: not a failure, not a round.
      for (const pending of batch) {
        pending.round--;
        this.enqueue(pending);
      }
      return;
    }
    if (
      isTransient(error) ||
      postgresErrorCode(error) === LOCK_NOT_AVAILABLE ||
      (batch.length === 1 && isUniqueViolation(error))
    ) {
      // A unique violation alone: another process wrote the idempotency key after this batch
      // read it; the next round reads it under the team lock and replays it.
      for (const pending of batch) this.again(pending, error);
      return;
    }
    if (batch.length === 1) {
      batch[0]!.reject(error);
      return;
    }
    for (const pending of batch) {
      pending.alone = true;
      this.again(pending, error);
    }
  }

  /** Sends a call round again, or answers `error` when it has had its rounds. */
  private again(pending: Pending, error: unknown): void {
    if (pending.round < MAX_ROUNDS) this.enqueue(pending);
    else pending.reject(error);
  }

  private replay(pending: Pending, shard: ShardRecord): void {
    let replayed: ShardRecord;
    try {
      replayed = replayOf(shard, pending.request);
    } catch (error) {
      pending.reject(error);
      return;
    }
    pending.resolve({ shard: replayed, replayed: true });
  }
}

/** PostgreSQL's lock_timeout: a late team lock (`checkTeamsLate`) waited too long. */
const LOCK_NOT_AVAILABLE = '55P03';

/**
 * How long a batch that wrote its shards waits for its teams' locks before it gives up and goes
 * again with the locks first. Another batch's late check holds a team's lock for one statement
 * and its COMMIT; a holder that took the lock first may be waiting for this batch's GPU rows.
 */
const LATE_LOCK_TIMEOUT_MS = 250;

/**
 * The teams' locks, taken after a batch decided on a read without them and wrote its shards:
 * the batch commits only if each team it added shards to has the terms it was decided on and,
 * with those shards and everything committed before the lock, is within its limits (libs/limits
 * withinQuotaLimits: then every create of the batch is within them after all that committed
 * before it, as in a run that took the lock first). Otherwise the transaction rolls back
 * (TeamChanged) and the batch is decided again with the locks taken first. So creates for one
 * team from several control planes serialise only on this statement and COMMIT, not on their
 * whole transactions; the quota stays exact. Folds as the locked read does.
 */
async function checkTeamsLate(
  tx: RawSql,
  read: ReadonlyMap<string, TeamState>,
  teamIds: readonly string[],
): Promise<void> {
  if (teamIds.length === 0) return;
  const locked = await lockTeamStatesLate(tx, teamIds, LATE_LOCK_TIMEOUT_MS);
  for (const teamId of teamIds) {
    const before = read.get(teamId);
    const now = locked.get(teamId);
    if (
      before === undefined ||
      now === undefined ||
      !sameTerms(before, now) ||
      !withinQuotaLimits(usageOf(now), quotaPolicyOf(now))
    ) {
      throw new TeamChanged(teamId);
    }
  }
}

/** The teams a batch wrote shards for (placed or PENDING). */
function teamsAddedTo(
  batch: readonly Pending[],
  verdicts: ReadonlyMap<Pending, Verdict>,
): string[] {
  const teams = new Set<string>();
  for (const pending of batch) {
    if (verdicts.get(pending)?.kind === 'placed') teams.add(pending.teamId);
  }
  return [...teams].sort();
}

/** A batch decided on a team read that its lock then contradicted; it goes again, locks first. */
class TeamChanged extends Error {
  constructor(readonly teamId: string) {
    super(`team ${teamId} changed between the batch's read and its lock`);
  }
}

/** How many calls from the head of the queue go into the next batch. */
function takeable(queue: readonly Pending[]): number {
  let n = 0;
  while (n < queue.length && n < MAX_BATCH && !queue[n]!.alone) n++;
  return n;
}

function idempotencyKeysOf(batch: readonly Pending[]): { teamId: string; key: string }[] {
  return batch.flatMap(({ teamId, request }) =>
    request.idempotencyKey === null ? [] : [{ teamId, key: request.idempotencyKey }],
  );
}

function raceLostError(): ConflictError {
  return new ConflictError(
    'the GPUs this shard could take kept being taken by other requests; try again',
  );
}

function unreachable(value: never): never {
  throw new Error(`unhandled verdict: ${JSON.stringify(value)}`);
}
