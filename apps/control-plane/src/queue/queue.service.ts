import {
  Inject,
  Injectable,
  type OnApplicationBootstrap,
  type OnModuleDestroy,
} from '@nestjs/common';
import {
  admit,
  borrowedBytesOf,
  fairShareOf,
  priorityClasses,
  type AdmissionPlan,
  type HeldShard,
  type Host,
  type PendingShard,
  type WaitReason,
} from '@gpushards/limits';
import { Prisma, PrismaService } from '../database/index.js';
import { LOGGER, type Logger } from '../logging/logger.js';
import { FleetCache } from '../placement/fleet-cache.js';
import { QueueSignal } from '../placement/queue-signal.js';
import { CommitEffects, ShardLifecycle } from '../shards/shard-lifecycle.js';
import { sizeOf } from '../graphql/size.model.js';
import { applyPlacements, StalePlan } from './apply-placements.js';
import { QueueMetrics } from './queue-metrics.js';
import type { TeamShare } from './queue.model.js';
import { QUEUE_OPTIONS, type QueueOptions } from './queue-options.js';
import {
  readHeld,
  readPending,
  readReservedBytes,
  readTeams,
  withReservedBytes,
  type TeamRecord,
} from './queue-reads.js';

/** One key for every replica's admission pass: passes run one at a time across the fleet. */
const ADMISSION_LOCK = 0x67707371; // "gpsq"

/** A pass whose plan met GPUs that changed since they were read is run again, up to this often. */
const MAX_ATTEMPTS = 4;

/** What the last pass of this process decided for a shard that still waits. */
export interface QueueEntry {
  readonly shardId: string;
  readonly teamId: string;
  readonly position: number;
  readonly reason: string;
  readonly reasonKind: WaitReason['kind'];
  /** The shard it waits behind, for 'behind'. */
  readonly behind: string | null;
  /** Where it is expected to go, when it keeps a spot. */
  readonly spotHostId: string | null;
}

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
}

/**
 * Admission: places pending shards as capacity frees, in the queue's order (libs/limits
 * `admit`), expires those past their maximum wait and reclaims borrowed capacity for teams
 * within their guarantee. Runs on every signal that capacity may have freed and on a timer
 * (the backstop against a signal lost with a replica), one pass at a time per process and,
 * through a PostgreSQL advisory lock, across replicas. The plan is applied in the pass's one
 * transaction with conditional updates; a plan that meets changed GPUs rolls back and runs again.
 */
@Injectable()
export class QueueService implements OnApplicationBootstrap, OnModuleDestroy {
  private readonly logger: Logger;
  private readonly classes = priorityClasses();
  private running: Promise<void> | undefined;
  private again = false;
  private timer: NodeJS.Timeout | undefined;
  private entries = new Map<string, QueueEntry>();
  private teams: readonly TeamRecord[] = [];
  private stopped = false;

  constructor(
    private readonly prisma: PrismaService,
    private readonly cache: FleetCache,
    private readonly lifecycle: ShardLifecycle,
    private readonly signal: QueueSignal,
    private readonly metrics: QueueMetrics,
    @Inject(QUEUE_OPTIONS) private readonly options: QueueOptions,
    @Inject(LOGGER) logger: Logger,
  ) {
    this.logger = logger.child({ module: 'queue' });
  }

  onApplicationBootstrap(): void {
    this.signal.onFreed(() => this.trigger());
    if (this.options.sweepMs > 0) {
      this.timer = setInterval(() => this.trigger(), this.options.sweepMs);
      this.timer.unref();
    }
    this.trigger();
  }

  async onModuleDestroy(): Promise<void> {
    this.stopped = true;
    clearInterval(this.timer);
    await this.running?.catch(() => undefined);
  }

  /** Asks for a pass; passes asked for while one runs make one more pass after it. */
  trigger(): void {
    if (this.stopped) return;
    if (this.running !== undefined) {
      this.again = true;
      return;
    }
    this.running = this.loop().finally(() => {
      this.running = undefined;
    });
  }

  /** Runs a pass now (after any running one) and returns what it did; for tests and tools. */
  async admitNow(now: Date = new Date()): Promise<PassOutcome> {
    while (this.running !== undefined) await this.running.catch(() => undefined);
    let outcome: PassOutcome | undefined;
    const run = (async () => {
      outcome = await this.pass(now);
    })();
    this.running = run.finally(() => {
      this.running = undefined;
    });
    await this.running;
    return outcome!;
  }

  /** The waiting shards as the last pass of this process saw them, in queue order. */
  queue(): QueueEntry[] {
    return [...this.entries.values()];
  }

  entry(shardId: string): QueueEntry | undefined {
    return this.entries.get(shardId);
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

  private async loop(): Promise<void> {
    do {
      this.again = false;
      try {
        await this.pass(new Date());
      } catch (error) {
        this.logger.error(
          { err: error },
          'admission pass failed; the next signal or sweep retries',
        );
      }
    } while (this.again && !this.stopped);
  }

  private async pass(now: Date): Promise<PassOutcome> {
    for (let attempt = 1; ; attempt++) {
      const effects = new CommitEffects();
      try {
        const started = performance.now();
        const result = await this.prisma.$transaction(
          (tx) => this.decideAndApply(tx, now, effects),
          { maxWait: 10_000, timeout: 30_000 },
        );
        this.lifecycle.afterCommit(effects);
        if (result !== undefined) {
          this.remember(result.plan, result.input.pending);
          this.metrics.passed(
            result.plan,
            result.input,
            now.getTime(),
            (performance.now() - started) / 1000,
          );
        }
        return {
          placed: result?.plan.placements.length ?? 0,
          expired: result?.plan.expired.length ?? 0,
          preempted: result?.plan.preemptions.length ?? 0,
          waiting: result?.plan.waiting.length ?? 0,
        };
      } catch (error) {
        if (!(error instanceof StalePlan) || attempt >= MAX_ATTEMPTS) throw error;
        await this.cache.reloadHosts(this.prisma, [...error.hostIds]);
      }
    }
  }

  private async decideAndApply(
    tx: Prisma.TransactionClient,
    now: Date,
    effects: CommitEffects,
  ): Promise<{ plan: AdmissionPlan; input: PassInput } | undefined> {
    await tx.$queryRaw`SELECT 1 AS locked FROM pg_advisory_xact_lock(${ADMISSION_LOCK}::bigint)`;
    const tp = performance.now();
    const pending = await readPending(tx, this.classes);
    this.logger.debug({ pendingMs: performance.now() - tp }, 'pending read');
    this.signal.setPendingCount(pending.length);
    if (pending.length === 0) {
      return {
        plan: { placements: [], preemptions: [], expired: [], waiting: [] },
        input: { pending, held: [], teams: this.teams, fleet: this.cache.hosts() },
      };
    }
    const t0 = performance.now();
    const teams = await readTeams(tx, this.options.halfLifeMs, now);
    const t1 = performance.now();
    // The shards that hold capacity matter only for reclaim, i.e. when a waiting shard's team
    // has a guarantee. Otherwise they are not read (8,000 rows on a full 1,000-host fleet) and
    // the teams' limits are left to createShard, which counted the pending shards against them.
    const guaranteed = new Set(teams.filter((t) => t.guarantee.bytes > 0).map((t) => t.id));
    const reclaimPossible = pending.some((shard) => guaranteed.has(shard.teamId));
    const held = reclaimPossible ? await readHeld(tx, this.classes) : [];
    const t2 = performance.now();
    this.teams = teams;
    let fleet = this.cache.hosts();
    const decide = () =>
      admit({
        fleet,
        held,
        pending,
        teams: reclaimPossible ? teams : teams.map(withoutLimits),
        now: now.getTime(),
      });
    let plan = decide();
    if (plan.preemptions.length > 0) {
      // A stop is not undone by a conditional update that misses: decide it on the GPUs as
      // this transaction reads them, after the queue and the held shards. The cache may not
      // have another replica's release yet, and would reclaim again for a shard whose victims
      // that replica has just requeued.
      fleet = withReservedBytes(fleet, await readReservedBytes(tx));
      plan = decide();
    }
    const t3 = performance.now();
    this.logger.debug(
      { teamsMs: t1 - t0, heldMs: t2 - t1, decideMs: t3 - t2, pending: pending.length },
      'admission pass decided',
    );
    await applyPlacements(tx, this.lifecycle, plan.placements, effects);
    for (const shardId of plan.expired) {
      const shard = await this.lifecycle.lock(tx, shardId);
      if (shard?.state !== 'PENDING') continue;
      await this.lifecycle.moveTo(
        tx,
        shard,
        'EXPIRED',
        'expired',
        { failureReason: 'waited in the queue past its maximum wait' },
        effects,
        now,
      );
    }
    const teamNames = new Map(teams.map((team) => [team.id, team.name]));
    for (const preemption of plan.preemptions) {
      const victim = await this.lifecycle.lock(tx, preemption.victimId);
      if (
        victim === undefined ||
        !(victim.state === 'PLACED' || victim.state === 'STARTING' || victim.state === 'RUNNING')
      ) {
        continue;
      }
      const reason =
        `reclaimed: its team borrowed beyond its guarantee, and shard ${preemption.forShardId} ` +
        `of team ${
          teamNames.get(pending.find((p) => p.id === preemption.forShardId)?.teamId ?? '') ?? '?'
        } waits within its own`;
      await this.lifecycle.moveTo(
        tx,
        victim,
        'STOPPING',
        'reclaim',
        { failureReason: reason },
        effects,
        now,
      );
      await tx.$executeRaw`
        UPDATE shard SET stop_intent = ${victim.requeue ? 'requeue' : 'preempt'},
                         reclaim_for = ${preemption.forShardId}::uuid
         WHERE id = ${victim.id}::uuid`;
      const hostId = preemption.hostId;
      const grace = this.options.reclaimGraceSeconds;
      effects.command(
        { shardId: victim.id, hostId, command: 'stop', reason: 'reclaim' },
        (commands) => commands.stop(hostId, victim.id, grace),
      );
    }
    return { plan, input: { pending, held, teams, fleet } };
  }

  private remember(plan: AdmissionPlan, pending: readonly PendingShard[]): void {
    const entries = new Map<string, QueueEntry>();
    const teamOf = new Map(pending.map((shard) => [shard.id, shard.teamId]));
    for (const waiting of plan.waiting) {
      entries.set(waiting.shardId, {
        shardId: waiting.shardId,
        teamId: teamOf.get(waiting.shardId) ?? '',
        position: waiting.position,
        reason: describeWait(waiting.reason),
        reasonKind: waiting.reason.kind,
        behind:
          waiting.reason.kind === 'behind' || waiting.reason.kind === 'reclaimed'
            ? waiting.reason.shardId
            : null,
        spotHostId: waiting.spot?.hostId ?? null,
      });
    }
    this.entries = entries;
    this.signal.setPendingCount(entries.size);
  }
}

function withoutLimits(team: TeamRecord): TeamRecord {
  const { maxTotalBytes: _bytes, maxShards: _shards, ...rest } = team;
  return rest;
}

export function describeWait(reason: WaitReason): string {
  switch (reason.kind) {
    case 'capacity':
      return 'no host has room for it now; it runs as soon as one frees enough';
    case 'behind':
      return `the room it fits is kept for shard ${reason.shardId}, ahead of it in the queue`;
    case 'quota':
      return `its team's limit: ${reason.message}`;
    case 'guarantee':
      return reason.message;
    case 'reclaimed':
      return `it was stopped to make room for shard ${reason.shardId}, and waits until that one is placed`;
    case 'reclaiming':
      return reason.victimIds.length > 0
        ? `borrowed shards are being stopped for it: ${reason.victimIds.join(', ')}`
        : 'borrowed shards are being stopped for it';
  }
}
