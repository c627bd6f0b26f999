import {
  Inject,
  Injectable,
  type OnApplicationBootstrap,
  type OnModuleDestroy,
} from '@nestjs/common';
import {
  admit,
  AdmissionQueue,
  borrowedBytesOf,
  fairShareOf,
  priorityClasses,
  type AdmissionPlan,
  type HeldShard,
  type Host,
  type PendingShard,
} from '@gpushards/limits';
import { PrismaService, type RawSql } from '../database/index.js';
import { LOGGER, type Logger } from '../logging/logger.js';
import { FleetCache } from '../placement/fleet-cache.js';
import { QueueSignal } from '../placement/queue-signal.js';
import { CommitEffects, ShardLifecycle } from '../shards/shard-lifecycle.js';
import { sizeOf } from '../graphql/size.model.js';
import { applyPlacements, StalePlan } from './apply-placements.js';
import { applyExpiries, applyReclaims } from './apply-stops.js';
import { QueueMetrics } from './queue-metrics.js';
import type { TeamShare } from './queue.model.js';
import { QUEUE_OPTIONS, type QueueOptions } from './queue-options.js';
import { AdmissionLease, type QueueChange } from './admission-lease.js';
import { PassRunner } from './pass-runner.js';
import { PendingStore } from './pending-store.js';
import { queueEntries, type QueueEntry } from './queue-entries.js';
import { StartEstimates } from './start-estimates.js';
import {
  countPlacedAmong,
  readElastic,
  readHeld,
  readPassState,
  readPending,
  readReservedBytes,
  readTeams,
  withReclaimsInFlight,
  type PassState,
  withReservedBytes,
  withSuspendRoom,
  type TeamRecord,
} from './queue-reads.js';
import { applyResumes, applySuspensions } from './apply-elastic.js';
import { ElasticMoves } from '../elastic/elastic-moves.js';

/**
 * Taken by every pass's transaction: passes that apply a plan run one at a time across
 * replicas even when two believe they are the admitter (one whose lease connection just died
 * while its pass still runs) or a follower runs one (admitNow).
 */
export const ADMISSION_LOCK = 0x67707371; // "gpsq"

/** A pass whose plan met GPUs that changed since they were read is run again, up to this often. */
const MAX_ATTEMPTS = 4;

export interface PassOutcome {
  readonly placed: number;
  readonly expired: number;
  readonly preempted: number;
  readonly waiting: number;
}

/** What a pass decided on. */
export interface PassInput {
  readonly pending: readonly PendingShard[];
  readonly held: readonly HeldShard[];
  readonly teams: readonly TeamRecord[];
  readonly fleet: readonly Host[];
  /** Reclaims in flight: the shard they are for, its victims' stop times (ms). */
  readonly victimStops: ReadonlyMap<string, readonly number[]>;
}

/**
 * Admission: places pending shards as capacity frees, in the queue's order (libs/limits
 * `admit`), expires those past their maximum wait and reclaims borrowed capacity for teams
 * within their guarantee.
 *
 * One replica admits at a time, the holder of the AdmissionLease; it keeps the queue in memory
 * (PendingStore) and runs a pass on every signal of its own process, every change a follower
 * forwards, and on a timer (the backstop). A follower forwards what its commits change to the
 * admitter and, on the timer, decides a pass without applying it, for what its API shows of the
 * queue (positions, reasons, the count createShard queues behind). The plan is applied in the
 * pass's one transaction with conditional updates; a plan that meets changed GPUs rolls back
 * and runs again.
 */
@Injectable()
export class QueueService implements OnApplicationBootstrap, OnModuleDestroy {
  private readonly logger: Logger;
  private readonly classes = priorityClasses();
  private readonly runner: PassRunner<PassOutcome>;
  private readonly store = new PendingStore();
  private readonly estimates: StartEstimates;
  /** A follower freed room: the admitter's fleet cache reads the GPUs before the next pass. */
  private fleetStale = false;
  private timer: NodeJS.Timeout | undefined;
  private last: { waiting: AdmissionPlan['waiting']; pending: readonly PendingShard[] } = {
    waiting: [],
    pending: [],
  };
  private entries: Map<string, QueueEntry> | undefined = new Map();
  private teams: readonly TeamRecord[] = [];

  constructor(
    private readonly prisma: PrismaService,
    private readonly cache: FleetCache,
    private readonly lifecycle: ShardLifecycle,
    private readonly signal: QueueSignal,
    private readonly metrics: QueueMetrics,
    private readonly lease: AdmissionLease,
    private readonly elasticMoves: ElasticMoves,
    @Inject(QUEUE_OPTIONS) private readonly options: QueueOptions,
    @Inject(LOGGER) logger: Logger,
  ) {
    this.logger = logger.child({ module: 'queue' });
    this.estimates = new StartEstimates(options.reclaimGraceSeconds);
    this.runner = new PassRunner(
      () => this.pass(new Date(), false),
      (error) =>
        this.logger.error(
          { err: error },
          'admission pass failed; the next signal or sweep retries',
        ),
    );
  }

  onApplicationBootstrap(): void {
    // Room another replica freed, found by this process's fleet cache.
    this.signal.onFreed(() => {
      if (this.lease.held) this.trigger();
    });
    this.signal.onCommitted((change) => this.committed(change));
    this.lease.start({
      acquired: () => {
        this.store.invalidate();
        this.trigger();
      },
      lost: () => this.store.invalidate(),
      wake: (change) => {
        if (change.freed) this.fleetStale = true;
        this.changed(change);
      },
    });
    if (this.options.sweepMs > 0) {
      this.timer = setInterval(() => this.trigger(), this.options.sweepMs);
      this.timer.unref();
    }
    if (!this.lease.held) this.trigger();
  }

  async onModuleDestroy(): Promise<void> {
    clearInterval(this.timer);
    await this.runner.stop();
  }

  /** Asks for a pass (a decision without applying it on a follower). */
  trigger(): void {
    this.runner.trigger();
  }

  /**
   * Runs a pass now (after any running one) and applies it, whether this replica is the
   * admitter or not (a follower reads the queue whole); for tests and tools.
   */
  admitNow(now: Date = new Date()): Promise<PassOutcome> {
    return this.runner.runNow(() => this.pass(now, true));
  }

  /** The waiting shards as the last pass of this process saw them, in queue order. */
  queue(): QueueEntry[] {
    return [...this.entryMap().values()];
  }

  entry(shardId: string): QueueEntry | undefined {
    return this.entryMap().get(shardId);
  }

  /** Teams as the last pass read them (guarantee, decayed usage). */
  teamRecords(): readonly TeamRecord[] {
    return this.teams;
  }

  /** A team's guarantee, borrowed and held bytes and fair share, read now. */
  async teamShare(teamId: string): Promise<TeamShare> {
    const now = new Date();
    const teams = await readTeams(this.prisma, this.options.halfLifeMs, now);
    const team = teams.find((t) => t.id === teamId);
    const held = (await readHeld(this.prisma, this.classes)).filter((s) => s.teamId === teamId);
    const [pending] = await this.prisma.$queryRaw<{ n: number }[]>`
      SELECT count(*)::int AS n FROM shard WHERE team_id = ${teamId}::uuid AND state = 'PENDING'`;
    const guarantee = team?.guarantee.bytes ?? 0;
    const key = fairShareOf(team);
    return {
      guarantee: sizeOf(guarantee),
      borrowed: sizeOf(team === undefined ? 0 : borrowedBytesOf(team, held)),
      held: sizeOf(held.reduce((sum, s) => sum + s.quotaBytes, 0)),
      decayedGiBHours: team?.decayedGiBHours ?? 0,
      fairShare: guarantee > 0 ? key.ratio : null,
      pending: pending?.n ?? 0,
    };
  }

  /** A commit of this process: the admitter takes it in, a follower forwards it. */
  private committed(change: QueueChange): void {
    if (this.lease.held) {
      this.changed(change);
      return;
    }
    if (change.entered.length > 0 || change.left.length > 0 || change.freed) {
      void this.lease.forward(change);
    }
  }

  private changed(change: QueueChange): void {
    this.store.entered(change.entered);
    this.store.left(change.left);
    if (change.freed || change.entered.length > 0) this.trigger();
  }

  /**
   * One pass. The admitter (or `apply`, admitNow) decides and applies; a follower decides
   * over a whole read of the queue for what its API shows, and applies nothing.
   */
  private async pass(now: Date, apply: boolean): Promise<PassOutcome> {
    const admitter = this.lease.held;
    if (!admitter && !apply) return this.view(now);
    if (admitter && this.fleetStale) {
      this.fleetStale = false;
      await this.cache.refreshReservations();
    }
    for (let attempt = 1; ; attempt++) {
      const effects = new CommitEffects();
      try {
        const started = performance.now();
        // On the client's pool without its query interpreter (DirectSql): a pass's dozen
        // statements cost a third of the CPU they did through Prisma's transaction.
        const result = await this.prisma.direct.transaction(
          (tx) => this.decideAndApply(tx, now, effects, admitter),
          { maxWait: 10_000, timeout: 30_000 },
        );
        this.lifecycle.afterCommit(effects);
        if (admitter) {
          this.store.settled(result.settled);
          this.store.left(result.skipped);
        }
        this.remember(result.plan, result.input);
        this.estimates.applied(result.placed, result.plan.waiting);
        this.metrics.passed(
          result.plan,
          result.input,
          now.getTime(),
          (performance.now() - started) / 1000,
        );
        return outcomeOf(result.plan);
      } catch (error) {
        if (!(error instanceof StalePlan) || attempt >= MAX_ATTEMPTS) throw error;
        await this.cache.reloadHosts(this.prisma, [...error.hostIds]);
      }
    }
  }

  /** A follower's pass: the plan for what the API shows, applied by the admitter. */
  private async view(now: Date): Promise<PassOutcome> {
    const started = performance.now();
    const state = await readPassState(this.prisma, this.options.halfLifeMs, now);
    const pending = await readPending(this.prisma, this.classes);
    const decided = await this.decide(this.prisma, pending, state, now);
    await this.estimates.viewed(pending, decided.plan.waiting, (ids) =>
      countPlacedAmong(this.prisma, ids),
    );
    this.remember(decided.plan, decided.input);
    this.metrics.passed(
      { ...decided.plan, placements: [], preemptions: [] },
      decided.input,
      now.getTime(),
      (performance.now() - started) / 1000,
    );
    return { placed: 0, expired: 0, preempted: 0, waiting: decided.plan.waiting.length };
  }

  /**
   * Reads what the decision needs besides the queue and the pass's state (readPassState), and
   * decides: over the admitter's kept queue (AdmissionQueue) or a list read whole.
   */
  private async decide(
    reader: Pick<RawSql, '$queryRaw'>,
    waiting: AdmissionQueue | readonly PendingShard[],
    state: PassState,
    now: Date,
  ): Promise<{ plan: AdmissionPlan; input: PassInput }> {
    const t0 = performance.now();
    // Elastic memory (docs/elastic.md): hosts that suspend, suspended shards and the resumes
    // wanted; nothing more is read when nothing is elastic.
    const elastic = state.elasticActive ? await readElastic(reader, this.classes) : undefined;
    const { victimStops, teams } = state;
    const t1 = performance.now();
    const resumes = elastic?.resumes ?? [];
    const kept = waiting instanceof AdmissionQueue ? waiting : undefined;
    const listed =
      waiting instanceof AdmissionQueue ? [] : withReclaimsInFlight(waiting, victimStops);
    this.teams = teams;
    if ((kept?.size ?? listed.length) + resumes.length === 0) {
      return {
        plan: {
          placements: [],
          preemptions: [],
          suspensions: [],
          resumes: [],
          expired: [],
          waiting: [],
        },
        input: { pending: [], held: [], teams, fleet: this.cache.hosts(), victimStops },
      };
    }
    // The shards that hold capacity matter only for reclaim, i.e. when a waiting shard's team
    // has a guarantee. Otherwise they are not read (8,000 rows on a full 1,000-host fleet) and
    // the teams' limits are left to createShard, which counted the pending shards against them.
    const guaranteed = new Set(teams.filter((t) => t.guarantee.bytes > 0).map((t) => t.id));
    const reclaimPossible =
      [...guaranteed].some((teamId) => kept?.hasShardOf(teamId) === true) ||
      [...listed, ...resumes].some((shard) => guaranteed.has(shard.teamId));
    // Make-room needs the held shards too (the idle elastic ones), where a host suspends.
    const makeRoomPossible = elastic !== undefined;
    const held = reclaimPossible || makeRoomPossible ? await readHeld(reader, this.classes) : [];
    const t2 = performance.now();
    let fleet: readonly Host[] =
      elastic === undefined ? this.cache.hosts() : withSuspendRoom(this.cache.hosts(), elastic);
    const decide = () => {
      // The cache's index of room is of its own hosts only (not a copy with suspend room or
      // with GPUs read again).
      const cached = fleet === this.cache.hosts();
      const common = {
        fleet,
        ...(cached ? { roomIndex: this.cache.roomIndex() } : {}),
        held,
        ...(elastic === undefined ? {} : { suspended: elastic.suspended }),
        teams: reclaimPossible ? teams : teams.map(withoutLimits),
        now: now.getTime(),
      };
      return kept === undefined
        ? admit({ ...common, pending: [...listed, ...resumes] })
        : kept.admit({ ...common, reclaimsInFlight: victimStops, resumes });
    };
    let plan = decide();
    if (plan.preemptions.length > 0) {
      // A stop is not undone by a conditional update that misses: decide it on the GPUs as
      // this transaction reads them, after the queue and the held shards. The cache may not
      // have another replica's release yet, and would reclaim again for a shard whose victims
      // that replica has just requeued.
      fleet = withReservedBytes(fleet, await readReservedBytes(reader));
      plan = decide();
    }
    const pending = (kept === undefined ? listed : kept.shards()).concat(resumes);
    this.logger.debug(
      {
        elasticMs: t1 - t0,
        heldMs: t2 - t1,
        decideMs: performance.now() - t2,
        pending: pending.length,
      },
      'admission pass decided',
    );
    return { plan, input: { pending, held, teams, fleet, victimStops } };
  }

  private async decideAndApply(
    tx: RawSql,
    now: Date,
    effects: CommitEffects,
    fromMemory: boolean,
  ): Promise<{
    /** The plan as applied: placements and stops skipped at commit left out. */
    plan: AdmissionPlan;
    input: PassInput;
    /** How many this pass placed. */
    placed: number;
    /** Placed or expired by this pass. */
    settled: string[];
    /** Found no longer PENDING when applying. */
    skipped: string[];
  }> {
    // The admission lock, then (in a snapshot taken after it) whether anything is elastic, the
    // reclaims in flight and the teams: one round trip.
    const state = await readPassState(tx, this.options.halfLifeMs, now, ADMISSION_LOCK);
    const tp = performance.now();
    const queued = fromMemory
      ? await this.store.sync(tx, this.classes)
      : await readPending(tx, this.classes);
    this.logger.debug({ pendingMs: performance.now() - tp, fromMemory }, 'pending read');
    const { plan, input } = await this.decide(tx, queued, state, now);
    const { pending, teams } = input;
    // Resumes first: they are pinned to their GPUs, ahead of what the pass placed beside them.
    const resumed = await applyResumes(
      tx,
      this.elasticMoves,
      this.lifecycle,
      plan.resumes,
      plan.placements,
      effects,
    );
    const skipped = await applyPlacements(tx, this.lifecycle, plan.placements, effects);
    const placedIds = plan.placements.map((p) => p.shardId).filter((id) => !skipped.includes(id));
    const placed = placedIds.length;
    const expiries = await applyExpiries(tx, this.lifecycle, plan.expired, effects, now);
    const { preempted, victimStops } = await applyReclaims(
      tx,
      this.lifecycle,
      plan.preemptions,
      {
        pending,
        teamNames: new Map(teams.map((team) => [team.id, team.name])),
        victimStops: input.victimStops,
        graceSeconds: this.options.reclaimGraceSeconds,
      },
      effects,
      now,
    );
    const suspended = await applySuspensions(
      tx,
      this.elasticMoves,
      this.lifecycle,
      plan.suspensions,
      effects,
    );
    const settled = [...placedIds, ...expiries.settled];
    skipped.push(...expiries.skipped);
    // What was applied: placements and stops that met a shard no longer as decided are not
    // counted (metrics, the pass's outcome).
    const skippedIds = new Set(skipped);
    const applied: AdmissionPlan = {
      ...plan,
      placements: plan.placements.filter((p) => !skippedIds.has(p.shardId)),
      preemptions: preempted,
      suspensions: suspended,
      resumes: resumed,
    };
    return { plan: applied, input: { ...input, victimStops }, placed, settled, skipped };
  }

  /**
   * Keeps the plan's waiting shards and the reclaims in flight; the entries the API reads (start
   * estimates included, as of then) are built when first asked.
   */
  private remember(plan: AdmissionPlan, { pending, victimStops }: PassInput): void {
    this.last = { waiting: plan.waiting, pending };
    this.estimates.reclaims(victimStops);
    this.entries = undefined;
    this.signal.setPendingCount(plan.waiting.length);
  }

  private entryMap(): Map<string, QueueEntry> {
    this.entries ??= queueEntries(
      this.last.waiting,
      this.last.pending,
      this.estimates.of(this.last.waiting),
    );
    return this.entries;
  }
}

function outcomeOf(plan: AdmissionPlan): PassOutcome {
  return {
    placed: plan.placements.length,
    expired: plan.expired.length,
    preempted: plan.preemptions.length,
    waiting: plan.waiting.length,
  };
}

function withoutLimits(team: TeamRecord): TeamRecord {
  const { maxTotalBytes: _bytes, maxShards: _shards, ...rest } = team;
  return rest;
}
