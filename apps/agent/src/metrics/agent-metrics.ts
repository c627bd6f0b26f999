import { Counter, Gauge, Histogram, Registry } from 'prom-client';

/** Seconds a move of a container's memory takes: 13 s for 25 GiB, 64 s for 123 GiB on an H200. */
const MOVE_BUCKETS = [0.05, 0.25, 1, 2.5, 5, 10, 20, 40, 80, 160, 320];
/** A wake, ring to RESUMED: the control plane's queue, then the move back. */
const WAKE_BUCKETS = [0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 20, 40, 80, 160];
/** A pressure ring to the offender's memory gone: the fence's sample, the kill, the teardown. */
const RELIEF_BUCKETS = [0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5];

/**
 * The agent's own metrics (docs/metrics.md, "The agent"), in a registry of its own: served on
 * GPUSHARDS_METRICS_LISTEN when it is set, and by `Agent.metrics()`. Gauges whose value lives
 * in a service are filled at scrape time through `collect` hooks that service sets.
 */
export class AgentMetrics {
  readonly registry = new Registry();
  /** Read at each scrape: the memory module sets it. */
  suspendedSource: () => { bytes: number; suspended: number; partial: number } = () => ({
    bytes: 0,
    suspended: 0,
    partial: 0,
  });

  /** Moves of a shard's memory by direction, who asked, and how each ended. */
  readonly moves = new Counter({
    name: 'gpushards_agent_memory_moves_total',
    help: "Suspends and resumes of shards' GPU memory by direction, cause and outcome (ok, failed, refused)",
    labelNames: ['direction', 'cause', 'outcome'] as const,
    registers: [this.registry],
  });

  readonly movedBytes = new Counter({
    name: 'gpushards_agent_memory_moved_bytes_total',
    help: 'GPU memory moved to host RAM (suspend) and back (resume), summed over processes',
    labelNames: ['direction'] as const,
    registers: [this.registry],
  });

  readonly moveSeconds = new Histogram({
    name: 'gpushards_agent_memory_move_seconds',
    help: 'Seconds one suspend or resume took, first driver call to the last',
    labelNames: ['direction', 'outcome'] as const,
    buckets: MOVE_BUCKETS,
    registers: [this.registry],
  });

  readonly suspendedBytes: Gauge = new Gauge({
    name: 'gpushards_agent_suspended_bytes',
    help: "GPU memory of this host's shards held in host RAM now (what their last suspends moved)",
    registers: [this.registry],
    collect: (): void => this.suspendedBytes.set(this.suspendedSource().bytes),
  });

  readonly suspendedShards: Gauge<'memory'> = new Gauge({
    name: 'gpushards_agent_suspended_shards',
    help: 'Shards of this host whose GPU memory is in host RAM, all (suspended) or in part (partial)',
    labelNames: ['memory'] as const,
    registers: [this.registry],
    collect: (): void => {
      const now = this.suspendedSource();
      this.suspendedShards.set({ memory: 'suspended' }, now.suspended);
      this.suspendedShards.set({ memory: 'partial' }, now.partial);
    },
  });

  readonly suspendBudgetBytes = new Gauge({
    name: 'gpushards_agent_suspend_budget_bytes',
    help: "Host RAM this host lets suspended shards' caps take (GPUSHARDS_SUSPEND_BUDGET; 0: no suspends)",
    registers: [this.registry],
  });

  readonly wakes = new Counter({
    name: 'gpushards_agent_wake_messages_total',
    help: 'Wake messages published: a process of a suspended shard asked for the GPU',
    registers: [this.registry],
  });

  readonly wakeLatency = new Histogram({
    name: 'gpushards_agent_wake_latency_seconds',
    help: "Seconds from a suspended shard's first wake ring to its memory back on the GPU (RESUMED)",
    buckets: WAKE_BUCKETS,
    registers: [this.registry],
  });

  readonly pressureSignals = new Counter({
    name: 'gpushards_agent_pressure_signals_total',
    help: 'Pressure rings seen: libvgpu.so found the driver out of memory a shard was promised',
    labelNames: ['gpu'] as const,
    registers: [this.registry],
  });

  readonly pressureSamples = new Counter({
    name: 'gpushards_agent_pressure_samples_total',
    help: 'Host fence samples taken at once for a pressure ring instead of at the next tick',
    registers: [this.registry],
  });

  readonly pressureRelief = new Histogram({
    name: 'gpushards_agent_pressure_relief_seconds',
    help: 'Seconds from a pressure ring to the memory of the process the fence killed for it being gone',
    labelNames: ['gpu'] as const,
    buckets: RELIEF_BUCKETS,
    registers: [this.registry],
  });

  readonly unattributedBytes = new Gauge({
    name: 'gpushards_agent_unattributed_bytes',
    help: 'GPU memory held by processes of no shard that are not on the allow-list (placement leaves it out)',
    labelNames: ['gpu'] as const,
    registers: [this.registry],
  });

  text(): Promise<string> {
    return this.registry.metrics();
  }
}
