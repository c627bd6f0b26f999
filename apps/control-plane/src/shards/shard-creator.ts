import { Inject, Injectable } from '@nestjs/common';
import {
  bytes,
  checkPriorityClass,
  evaluateQuota,
  formatSize,
  place,
  priorityClasses,
  withinGuaranteeRequest,
  type Host,
  type PlacementRequest,
  type TeamUsage,
} from '@gpushards/limits';
import { randomUUID } from 'node:crypto';
import { performance } from 'node:perf_hooks';
import type { Caller } from '../auth/caller.js';
import {
  isDatabaseBusy,
  isUniqueViolation,
  postgresErrorCode,
  type RawSql,
  PrismaService,
} from '../database/index.js';
import {
  ConflictError,
  ImageNotAllowedError,
  NoCapacityError,
  NotFoundError,
  QuotaExceededError,
} from '../errors/domain-errors.js';
import { teamComputeRefusal } from '../compute/compute-input.js';
import { LOGGER, type Logger } from '../logging/logger.js';
import { FleetCache } from '../placement/fleet-cache.js';
import { QueueSignal } from '../placement/queue-signal.js';
import { PlacementMetrics, type PlacementOutcome } from '../placement/placement-metrics.js';
import {
  noCapacityError,
  PlacementService,
  type PlacementHolds,
} from '../placement/placement.service.js';
import {
  computeAddedBy,
  findByIdempotencyKeys,
  giveBack,
  idempotencyKeyOf,
  writeBatch,
  writePending,
  type GpuTake,
  type PlannedShard,
} from './create-statements.js';
import { replayOf } from './idempotency.js';
import { imageAllowed } from './image-allow-list.js';
import { launchSpecOf } from './launch-spec.js';
import { CommitEffects, ShardLifecycle } from './shard-lifecycle.js';
import type { ShardRequest } from './shard-input.js';
import type { ShardRecord } from './shard-record.js';
import {
  placementRequestOf,
  quotaError,
  quotaPolicyOf,
  readTeamStates,
  usageOf,
  type TeamState,
} from './team-quota.js';

/** A createShard's answer: its shard, and whether an earlier call under its key made it. */
export interface CreatedShard {
  readonly shard: ShardRecord;
  readonly replayed: boolean;
}

/**
 * Writes in one batch: shards whose GPUs another control plane took first are placed again on
 * those hosts as read in the transaction, and written again.
 */
const MAX_WRITES = 8;

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

/** A createShard waiting for, or taking part in, a batch. */
interface Pending {
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
  readonly resolve: (created: CreatedShard) => void;
  readonly reject: (error: unknown) => void;
}

/** What a batch made of one call, before and after its statement ran. */
type Verdict =
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
 * of four statements whatever its size (five with idempotency keys): BEGIN, the teams' locks
 * with their quota and usage read in the same round trip, (the idempotency keys,) the
 * conditional reservation with every shard, reservation and audit row (`writeBatch`), COMMIT.
 * Within a batch the calls are decided in arrival order, each seeing what the earlier ones
 * reserved and held, exactly as if they had run one after another; the team locks serialize
 * against other control planes and resizes as before.
 *
 * One batch at a time keeps the pool free for everything else and makes the fleet cache's
 * held bytes exactly those of the running batch, so a NO_CAPACITY decided on it is as true as
 * one decided on a fresh read plus this transaction's own picks.
 */
@Injectable()
export class ShardCreator {
  private readonly logger: Logger;
  private readonly queue: Pending[] = [];
  private draining = false;

  constructor(
    private readonly prisma: PrismaService,
    private readonly placement: PlacementService,
    private readonly cache: FleetCache,
    private readonly lifecycle: ShardLifecycle,
    private readonly metrics: PlacementMetrics,
    private readonly queueSignal: QueueSignal,
    @Inject(LOGGER) logger: Logger,
  ) {
    this.logger = logger.child({ module: 'shards' });
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
        const teams = await readTeamStates(tx, teamIds, nonPreemptibleTeamsOf(batch), {
          lockAndFold: true,
        });
        const existing = await findByIdempotencyKeys(tx, idempotencyKeysOf(batch));
        this.decide(batch, teams, existing, verdicts, plans);
        lostRaces = await this.write(tx, plans, verdicts, effects);
        await this.writeQueued(tx, batch, verdicts, effects);
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

  /**
   * Decides each call in arrival order against its team's quota (counting what earlier calls
   * of the batch took) and places it on the cached fleet, holding its GPUs there so that the
   * next call sees them taken.
   */
  private decide(
    batch: readonly Pending[],
    teams: ReadonlyMap<string, TeamState>,
    existing: ReadonlyMap<string, ShardRecord>,
    verdicts: Map<Pending, Verdict>,
    plans: Map<Pending, Plan>,
  ): void {
    const usage = new Map<string, TeamUsage>();
    /** Per team: bytes on the GPUs its guarantee covers, with this batch's non-preemptible plans. */
    const covered = new Map<string, number>();
    const firstByKey = new Map<string, Pending>();
    for (const pending of batch) {
      const { teamId, request } = pending;
      const team = teams.get(teamId);
      if (team === undefined) {
        verdicts.set(pending, { kind: 'failed', error: new NotFoundError('team', teamId) });
        continue;
      }
      if (request.idempotencyKey !== null) {
        const key = idempotencyKeyOf(teamId, request.idempotencyKey);
        const earlier = existing.get(key);
        if (earlier !== undefined) {
          verdicts.set(pending, replayVerdict(earlier, request));
          continue;
        }
        const first = firstByKey.get(key);
        if (first !== undefined) {
          verdicts.set(pending, { kind: 'follows', first });
          continue;
        }
        firstByKey.set(key, pending);
      }
      const images = team.allowedImages ?? [];
      if (!imageAllowed(request.image, images)) {
        verdicts.set(pending, {
          kind: 'failed',
          error: new ImageNotAllowedError(request.image, images, 'team'),
        });
        continue;
      }
      const policy = quotaPolicyOf(team);
      const held = usage.get(teamId) ?? usageOf(team);
      const decision = evaluateQuota(request, held, policy);
      if (!decision.allowed) {
        verdicts.set(pending, { kind: 'refused', error: quotaError(decision) });
        continue;
      }
      const computeRefusal = teamComputeRefusal(request.compute, team.maxComputeSharePercent);
      if (computeRefusal !== undefined) {
        verdicts.set(pending, { kind: 'refused', error: computeRefusal });
        continue;
      }
      const cls = checkPriorityClass(
        CLASSES,
        request.priorityClass,
        team.maxPriorityClass ?? undefined,
      );
      if (!cls.allowed) {
        verdicts.set(pending, {
          kind: 'refused',
          error: new QuotaExceededError(cls.message, { limit: 'maxPriorityClass' }),
        });
        continue;
      }
      const need = request.bytesPerGpu * request.gpuCount;
      const guarantee = Number(team.guaranteeBytes ?? 0n);
      const term = team.guaranteeGpuModel ?? undefined;
      const coveredBytes = cls.cls.preemptible ? 0 : (covered.get(teamId) ?? coveredOf(team));
      // A non-preemptible shard runs only on GPUs its team's guarantee covers, within it.
      const narrowed = cls.cls.preemptible
        ? placementRequestOf(request, policy)
        : withinGuaranteeRequest(placementRequestOf(request, policy), term);
      let planned: Plan | Verdict;
      if (!cls.cls.preemptible && (narrowed === undefined || coveredBytes + need > guarantee)) {
        // Only guaranteed capacity may hold a class that is never preempted.
        const on = term === undefined || term.trim() === '' ? '' : ` on "${term}" GPUs`;
        const message =
          narrowed === undefined
            ? `priority class "${cls.cls.name}" is never preempted, so it runs only on the ` +
              `GPUs of its team's guarantee ("${term}"), which the requested models exclude`
            : `priority class "${cls.cls.name}" is never preempted, so it runs only within the ` +
              `team's guarantee${on}: ${formatSize(bytes(coveredBytes))} held there + ` +
              `${formatSize(bytes(need))} requested > ${formatSize(bytes(guarantee))} guaranteed`;
        planned = request.queue
          ? { kind: 'queued', reason: message }
          : { kind: 'refused', error: new QuotaExceededError(message, { limit: 'guarantee' }) };
      } else if (
        request.queue &&
        this.queueSignal.pendingCount() > 0 &&
        couldEverFit(narrowed!, this.cache.hosts())
      ) {
        // Shards already wait: this one queues behind them (admission runs at once after).
        planned = { kind: 'queued', reason: 'shards are waiting ahead of it' };
      } else {
        planned = this.plan(pending, narrowed!);
      }
      if (planned.kind !== 'planned') {
        verdicts.set(pending, planned);
        if (planned.kind !== 'queued') continue;
      } else {
        plans.set(pending, planned);
      }
      usage.set(teamId, {
        reservedBytes: bytes(held.reservedBytes + request.bytesPerGpu * request.gpuCount),
        shardCount: held.shardCount + 1,
      });
      if (!cls.cls.preemptible) covered.set(teamId, coveredBytes + need);
    }
  }

  /** Places the call on the cached fleet and holds its GPUs there, or says why it cannot. */
  private plan(pending: Pending, placementRequest: PlacementRequest): Plan | Verdict {
    const placed = this.placement.place(placementRequest);
    if (placed.kind === 'no-fit') {
      if (!pending.fresh) return { kind: 'needs-fresh-fleet' };
      if (pending.request.queue && couldEverFit(placementRequest, this.cache.hosts())) {
        return { kind: 'queued', reason: placed.message };
      }
      return { kind: 'refused', error: noCapacityError(placed) };
    }
    const holds = this.placement.holds();
    holds.hold(placed.gpuUuids, placed.reservedBytesPerGpu, computeAddedBy(pending.request));
    return {
      kind: 'planned',
      placementRequest,
      holds,
      shard: {
        shardId: randomUUID(),
        auditId: randomUUID(),
        caller: pending.caller,
        teamId: pending.teamId,
        request: pending.request,
        placed,
      },
    };
  }

  /**
   * Writes the planned shards. Those whose GPUs another control plane took first are placed
   * again on their hosts as the transaction reads them now, up to MAX_WRITES times in all.
   * Returns whether any call lost a race (its team's usage and the cache counted it meanwhile).
   */
  private async write(
    tx: RawSql,
    plans: Map<Pending, Plan>,
    verdicts: Map<Pending, Verdict>,
    effects: CommitEffects,
  ): Promise<boolean> {
    /** What this transaction added to each GPU's reserved bytes (and compute shares) so far. */
    const added = new Map<string, { bytes: number; permille: number; isolated: number }>();
    let toWrite = [...plans.keys()];
    let lostRaces = false;
    for (let writes = 1; toWrite.length > 0; writes++) {
      const written = await writeBatch(
        tx,
        toWrite.map((pending) => plans.get(pending)!.shard),
      );
      const losers: Pending[] = [];
      const takenByLosers = new Map<string, GpuTake>();
      for (const pending of toWrite) {
        const { placed, shardId } = plans.get(pending)!.shard;
        const { permille, isolated } = computeAddedBy(pending.request);
        const shard = written.shards.get(shardId);
        if (shard === undefined) {
          losers.push(pending);
          for (const uuid of placed.gpuUuids) {
            if (!written.takenUuids.has(uuid)) continue;
            const taken = takenByLosers.get(uuid) ?? { bytes: 0n, permille: 0, isolated: 0 };
            taken.bytes += BigInt(placed.reservedBytesPerGpu);
            taken.permille += permille;
            taken.isolated += isolated;
            takenByLosers.set(uuid, taken);
          }
          continue;
        }
        verdicts.set(pending, { kind: 'placed', shard });
        for (const uuid of placed.gpuUuids) {
          const sum = added.get(uuid) ?? { bytes: 0, permille: 0, isolated: 0 };
          sum.bytes += placed.reservedBytesPerGpu;
          sum.permille += permille;
          sum.isolated += isolated;
          added.set(uuid, sum);
        }
        effects.changes.push({ shard, previousState: null, state: 'PLACED', at: shard.createdAt });
        const spec = launchSpecOf(shard, placed.gpuUuids);
        effects.command({ shardId, hostId: placed.hostId, command: 'launch' }, (commands) =>
          commands.launch(placed.hostId, spec),
        );
      }
      await giveBack(tx, takenByLosers);
      if (losers.length === 0) break;
      lostRaces = true;
      const lostHosts = [...new Set(losers.map((p) => plans.get(p)!.shard.placed.hostId))];
      const again = losers.map((pending) => ({ pending, plan: plans.get(pending)! }));
      for (const { pending, plan } of again) {
        plan.holds.settle(false);
        plans.delete(pending);
      }
      if (writes === MAX_WRITES) {
        for (const { pending, plan } of again) {
          verdicts.set(pending, { kind: 'lost-race', hostId: plan.shard.placed.hostId });
        }
        break;
      }
      await this.cache.reloadHosts(tx, lostHosts, added);
      toWrite = [];
      for (const { pending, plan } of again) {
        const planned = this.plan(pending, plan.placementRequest);
        if (planned.kind === 'planned') {
          plans.set(pending, planned);
          toWrite.push(pending);
        } else {
          verdicts.set(pending, planned);
        }
      }
    }
    return lostRaces;
  }

  /** Writes the calls that wait as PENDING; their verdict becomes the written shard. */
  private async writeQueued(
    tx: RawSql,
    batch: readonly Pending[],
    verdicts: Map<Pending, Verdict>,
    effects: CommitEffects,
  ): Promise<void> {
    for (const pending of batch) {
      const verdict = verdicts.get(pending);
      if (verdict?.kind !== 'queued') continue;
      const shard = await writePending(
        tx,
        {
          shardId: randomUUID(),
          auditId: randomUUID(),
          caller: pending.caller,
          teamId: pending.teamId,
          request: pending.request,
        },
        verdict.reason,
      );
      effects.changes.push({ shard, previousState: null, state: 'PENDING', at: shard.createdAt });
      verdicts.set(pending, { kind: 'placed', shard });
    }
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
    if (isTransient(error) || (batch.length === 1 && isUniqueViolation(error))) {
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

/** A call placed on the cached fleet, holding its GPUs there until its batch ends. */
interface Plan {
  readonly kind: 'planned';
  readonly placementRequest: PlacementRequest;
  readonly shard: PlannedShard;
  readonly holds: PlacementHolds;
}

/** How many calls from the head of the queue go into the next batch. */
function takeable(queue: readonly Pending[]): number {
  let n = 0;
  while (n < queue.length && n < MAX_BATCH && !queue[n]!.alone) n++;
  return n;
}

/** What the team holds on its guarantee's GPUs; read for every team placing a non-preemptible class. */
function coveredOf(team: TeamState): number {
  if (team.guaranteedModelBytes === null) {
    throw new Error(`createShard: team ${team.teamId}'s guaranteed-model bytes were not read`);
  }
  return Number(team.guaranteedModelBytes);
}

/** The teams of the batch's calls whose class is never preempted (checked against the guarantee). */
function nonPreemptibleTeamsOf(batch: readonly Pending[]): string[] {
  const teams = new Set<string>();
  for (const { teamId, request } of batch) {
    if (CLASSES.get(request.priorityClass)?.preemptible === false) teams.add(teamId);
  }
  return [...teams];
}

function idempotencyKeysOf(batch: readonly Pending[]): { teamId: string; key: string }[] {
  return batch.flatMap(({ teamId, request }) =>
    request.idempotencyKey === null ? [] : [{ teamId, key: request.idempotencyKey }],
  );
}

function replayVerdict(existing: ShardRecord, request: ShardRequest): Verdict {
  try {
    return { kind: 'replayed', shard: replayOf(existing, request) };
  } catch (error) {
    return { kind: 'failed', error };
  }
}

const CLASSES = priorityClasses();

/**
 * Whether the request fits the fleet once everything held (memory and compute shares) has
 * ended and every host takes shards: a request that cannot (bigger than any GPU, a model or label the fleet lacks) is
 * refused at once instead of waiting forever.
 */
export function couldEverFit(request: PlacementRequest, fleet: readonly Host[]): boolean {
  const empty = fleet.map((host) => ({
    ...host,
    state: 'ONLINE' as const,
    gpus: host.gpus.map((gpu) => ({
      ...gpu,
      reservedBytes: bytes(0),
      guaranteedComputePermille: 0,
      isolatedComputePermille: 0,
    })),
  }));
  return place(request, empty).kind === 'placed';
}

function raceLostError(): ConflictError {
  return new ConflictError(
    'the GPUs this shard could take kept being taken by other requests; try again',
  );
}

function unreachable(value: never): never {
  throw new Error(`unhandled verdict: ${JSON.stringify(value)}`);
}
