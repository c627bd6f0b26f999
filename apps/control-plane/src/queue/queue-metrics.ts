import { Injectable } from '@nestjs/common';
import { borrowedBytesOf, type AdmissionPlan } from '@gpushards/limits';
import { Counter, Gauge, Histogram, Registry } from 'prom-client';
import type { PassInput } from './queue.service.js';

/**
 * The queue's metrics, as of this process's last admission pass: queue length and oldest wait
 * per team and GPU model (the model the request names, "any" when it names none), the wait of
 * shards placed from the queue, preemptions, borrowed bytes per team, and the pass's duration.
 * The gauges are computed from the last pass when scraped, not by every pass (a pass after one
 * freeing event must not walk 10,000 waiting shards for them).
 */
@Injectable()
export class QueueMetrics {
  private readonly length: Gauge<'team' | 'gpu_model'>;
  private readonly oldest: Gauge<'team' | 'gpu_model'>;
  private readonly wait: Histogram;
  private readonly preemptions: Counter<'team'>;
  private readonly borrowed: Gauge<'team'>;
  private readonly duration: Histogram;
  private last: { plan: AdmissionPlan; input: PassInput } | undefined;

  constructor(registry: Registry) {
    // prom-client calls `collect` with the metric as `this`; the gauges read this.last.
    // eslint-disable-next-line @typescript-eslint/no-this-alias
    const metrics = this;
    this.length = new Gauge({
      name: 'gpushards_queue_length',
      help: 'PENDING shards per team and requested GPU model, as of the last admission pass.',
      labelNames: ['team', 'gpu_model'],
      registers: [registry],
      collect: () => metrics.collectQueue(),
    });
    this.oldest = new Gauge({
      name: 'gpushards_queue_oldest_wait_seconds',
      help: 'How long the longest-waiting PENDING shard has waited, per team and GPU model.',
      labelNames: ['team', 'gpu_model'],
      registers: [registry],
      collect: () => metrics.collectQueue(),
    });
    this.wait = new Histogram({
      name: 'gpushards_queue_wait_seconds',
      help: 'Time from entering the queue to placement, for shards placed from the queue.',
      buckets: [0.01, 0.1, 1, 10, 60, 300, 900, 3600, 4 * 3600, 24 * 3600],
      registers: [registry],
    });
    this.preemptions = new Counter({
      name: 'gpushards_preemptions_total',
      help: 'Shards stopped to give borrowed capacity back, by the team that lost them.',
      labelNames: ['team'],
      registers: [registry],
    });
    this.borrowed = new Gauge({
      name: 'gpushards_borrowed_bytes',
      help: 'Requested bytes a team holds above its guarantee (preemptible), per team.',
      labelNames: ['team'],
      registers: [registry],
      collect: () => metrics.collectBorrowed(),
    });
    this.duration = new Histogram({
      name: 'gpushards_admission_pass_seconds',
      help: 'One admission pass: reads, decision and its transaction.',
      buckets: [0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1],
      registers: [registry],
    });
  }

  passed(plan: AdmissionPlan, input: PassInput, now: number, seconds: number): void {
    this.duration.observe(seconds);
    this.last = { plan, input };
    if (plan.placements.length === 0 && plan.preemptions.length === 0) return;
    // The placed shards lead the queue: stop once all are found, not after 10,000 waiting ones.
    const placed = new Set(plan.placements.map((placement) => placement.shardId));
    let left = placed.size;
    for (const shard of input.pending) {
      if (left === 0) break;
      if (!placed.has(shard.id)) continue;
      this.wait.observe(Math.max(0, now - shard.arrivedAt) / 1000);
      left--;
    }
    const names = new Map(input.teams.map((team) => [team.id, team.name]));
    for (const preemption of plan.preemptions) {
      this.preemptions.inc({ team: names.get(preemption.victimTeamId) ?? preemption.victimTeamId });
    }
  }

  /** Queue length and oldest wait per team and model, from the last pass, at scrape time. */
  private collectQueue(): void {
    this.length.reset();
    this.oldest.reset();
    if (this.last === undefined) return;
    const { plan, input } = this.last;
    const now = Date.now();
    const names = new Map(input.teams.map((team) => [team.id, team.name]));
    const byId = new Map(input.pending.map((shard) => [shard.id, shard]));
    const groups = new Map<
      string,
      { team: string; gpu_model: string; n: number; oldest: number }
    >();
    for (const waiting of plan.waiting) {
      const shard = byId.get(waiting.shardId);
      if (shard === undefined) continue;
      const team = names.get(shard.teamId) ?? shard.teamId;
      const gpuModel = shard.request.gpuModel?.include?.join('|') || 'any';
      const key = `${team}\u0000${gpuModel}`;
      const group = groups.get(key) ?? { team, gpu_model: gpuModel, n: 0, oldest: 0 };
      group.n++;
      group.oldest = Math.max(group.oldest, (now - shard.arrivedAt) / 1000);
      groups.set(key, group);
    }
    for (const { team, gpu_model, n, oldest } of groups.values()) {
      this.length.set({ team, gpu_model }, n);
      this.oldest.set({ team, gpu_model }, oldest);
    }
  }

  private collectBorrowed(): void {
    this.borrowed.reset();
    if (this.last === undefined) return;
    const { teams, held } = this.last.input;
    for (const team of teams) this.borrowed.set({ team: team.name }, borrowedBytesOf(team, held));
  }
}
