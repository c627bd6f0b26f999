import type Docker from 'dockerode';
import type { DestinationStream } from 'pino';
import {
  DEFAULT_COMPUTE_FENCE_WINDOW_SECONDS,
  DEFAULT_UNGOVERNED_THRESHOLD_PERCENT,
} from '@gpushards/limits';

import type { MpsPartition } from '../compute/mps-partition.js';
import type { SimulatedGpu } from '../gpus/simulated-gpus.js';
import type { ComputeTurns } from '../limits/limits-file.js';
import type { AgentLink } from '../link/agent-link.js';
import type { NatsLinkOptions } from '../link/nats-agent-link.js';
import type { LogLevel } from '../logging/logger.js';

/** Where the agent finds its GPUs. */
export type GpuSourceOptions =
  | {
      readonly kind: 'nvml';
      /** Default libnvidia-ml.so.1 (the loader's search path). */
      readonly nvmlLibrary?: string;
      /** Used once at start to measure a CUDA context; default libcuda.so.1. */
      readonly cudaLibrary?: string;
    }
  | {
      readonly kind: 'simulated';
      readonly gpus: readonly SimulatedGpu[];
      /**
       * A folder holding native/fakes' libnvidia-ml.so.1 and libcuda.so.1. With it the
       * agent discovers the simulated GPUs through the fakes (the same NVML code path) and
       * mounts them into shards so the interposer has a driver to sit on; without it the
       * GPUs exist only in the agent and shards get no CUDA driver.
       */
      readonly fakeLibraryDir?: string;
    };

/** The host's fence: sampling real GPU memory and acting on shards past their caps. */
export interface EnforcementOptions {
  /** Milliseconds between samples; 0 turns sampling (and enforcement) off. Default 50. */
  readonly intervalMs?: number;
  /** Real usage may pass a cap by this much before the policy acts; default 160 MiB. */
  readonly toleranceBytes?: number;
  /** Command names (/proc/<pid>/comm) of host processes whose GPU memory is expected. */
  readonly allowedProcesses?: readonly string[];
  /** Where /proc is (tests); default /proc. */
  readonly procRoot?: string;
}

/**
 * The compute fence (docs/agent.md, "Compute fence"): GPU work that no turn governs, seen
 * through NVML's per-process utilization against the compute ledger. Runs only on a host with
 * a compute ledger and no MPS partition.
 */
export interface ComputeFenceOptions {
  /** Seconds per window; 0 turns the fence off. Default 5; otherwise 1 to 3600. */
  readonly windowSeconds?: number;
  /** smUtil (percent) at which a sample counts as busy; default 10. */
  readonly thresholdPercent?: number;
}

/** How shard containers are confined beyond the defaults (docs/agent.md, "Containers"). */
export interface ContainerHardening {
  /** "uid[:gid]" every shard runs as, overriding the image's user; default the image's. */
  readonly user?: string;
  /** Most processes and threads a shard may have; default 4096. */
  readonly pidsLimit?: number;
}

/**
 * Host RAM that suspended shards' GPU memory may take (docs/elastic.md, "Room"), by their
 * caps: a size, or a percent of the host's memory (MemTotal). 0 turns suspends off.
 */
export type SuspendBudget = { readonly bytes: number } | { readonly percentOfRam: number };

/** Everything createAgent needs; main.ts builds it from the environment. */
export interface AgentOptions {
  /** This host's id: its NATS subjects, its Docker labels. */
  readonly hostId: string;
  /** Shown to people; default the machine's host name. */
  readonly hostName?: string;
  readonly labels?: Readonly<Record<string, string>>;
  /** NATS connection options, or a ready AgentLink (the one-box mode's in-process link). */
  readonly link: { readonly nats: NatsLinkOptions } | { readonly custom: AgentLink };
  readonly gpus: GpuSourceOptions;
  /** libvgpu.so on this host; bind-mounted read-only into every shard. */
  readonly interposerPath: string;
  /** The agent's own files (the ld.so.preload it mounts); default /var/lib/gpushards. */
  readonly stateDir: string;
  /** Shard region folders; default <stateDir>/regions. */
  readonly regionRoot?: string;
  /**
   * The host's compute ledger folder (one file per GPU, shared by every shard of the host:
   * docs/compute.md). When set, it is bind-mounted read-write into every shard, which then
   * takes turns on its GPUs by its compute share, and each shard's GPU activity is read from it
   * into heartbeats. Unset (the default): compute is not governed.
   */
  readonly computeLedgerDir?: string;
  /**
   * Where libvgpu.so makes every shard of this host wait for its compute turns: 'gpu' (the
   * default), behind a gate in the shard's streams (docs/compute.md, "Turns on the GPU"), or
   * 'cpu', in its launch calls. Written into each shard's limits file when its container is created; a running shard
   * keeps what it started with.
   */
  readonly computeTurns?: ComputeTurns;
  /**
   * The host's MPS partition (docs/agent.md, "MPS partition"): the MPS control daemon's pipe
   * folder, which must hold its `control` socket, and P, the whole percent of every GPU kept
   * for isolated shards (1..90). Every shard is then an MPS client: isolated ones at their share,
   * the others at 100 − P. Unset (the default): no partition, and isolated shards fail to launch.
   */
  readonly mps?: MpsPartition;
  /** Default 10. */
  readonly heartbeatSeconds?: number;
  /** Default 30. */
  readonly reconcileSeconds?: number;
  /** Grace before SIGKILL when reconciliation stops a shard; default 10. */
  readonly stopGraceSeconds?: number;
  /** Skips measuring the per-context size and reports this instead. */
  readonly contextOverheadBytes?: number;
  /** Default: dockerode's defaults (DOCKER_HOST or /var/run/docker.sock). */
  readonly docker?: Docker;
  readonly logLevel?: LogLevel;
  readonly logDestination?: DestinationStream;
  readonly enforcement?: EnforcementOptions;
  readonly computeFence?: ComputeFenceOptions;
  readonly containers?: ContainerHardening;
  /** Default: 50 % of the host's RAM (docs/agent.md, "Elastic memory"). */
  readonly suspendBudget?: SuspendBudget;
  /** Where to serve the agent's metrics (`GET /metrics`); unset: nowhere (Agent.metrics() still). */
  readonly metricsListen?: { readonly host: string; readonly port: number };
}

/** AgentOptions with every default filled in; what the services receive. */
export interface AgentConfig {
  readonly hostId: string;
  readonly hostName: string;
  readonly labels: Readonly<Record<string, string>>;
  readonly gpus: GpuSourceOptions;
  readonly interposerPath: string;
  readonly stateDir: string;
  readonly regionRoot: string;
  readonly computeLedgerDir?: string;
  readonly computeTurns: ComputeTurns;
  readonly mps?: MpsPartition;
  readonly heartbeatSeconds: number;
  readonly reconcileSeconds: number;
  readonly stopGraceSeconds: number;
  readonly contextOverheadBytes?: number;
  readonly enforcement: Required<EnforcementOptions>;
  readonly computeFence: Required<ComputeFenceOptions>;
  readonly containers: { readonly user?: string; readonly pidsLimit: number };
  /** Host RAM for suspended shards, in bytes; 0: this host does not suspend. */
  readonly suspendBudgetBytes: number;
  readonly metricsListen?: { readonly host: string; readonly port: number };
}

export const AGENT_CONFIG = Symbol('AgentConfig');

export const DEFAULTS = {
  stateDir: '/var/lib/gpushards',
  interposerPath: '/usr/lib/gpushards/libvgpu.so',
  heartbeatSeconds: 10,
  reconcileSeconds: 30,
  stopGraceSeconds: 10,
  natsUrl: 'nats://127.0.0.1:4222',
  nvmlLibrary: 'libnvidia-ml.so.1',
  cudaLibrary: 'libcuda.so.1',
  enforcementIntervalMs: 50,
  capToleranceBytes: 160 * 1024 * 1024,
  computeFenceSeconds: DEFAULT_COMPUTE_FENCE_WINDOW_SECONDS,
  computeFenceThresholdPercent: DEFAULT_UNGOVERNED_THRESHOLD_PERCENT,
  pidsLimit: 4096,
  computeTurns: 'gpu',
  suspendBudgetPercentOfRam: 50,
} as const;
