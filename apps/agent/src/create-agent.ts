import 'reflect-metadata';

import { resolve } from 'node:path';
import { hostname, totalmem } from 'node:os';

import type { INestMicroservice } from '@nestjs/common';
import { NestFactory } from '@nestjs/core';
import { assertValidHostId } from '@gpushards/protocol';
import Docker from 'dockerode';

import { AgentModule } from './agent.module.js';
import { checkMpsPartition } from './compute/mps-partition.js';
import { DEFAULTS, type AgentConfig, type AgentOptions } from './config/agent-options.js';
import { GpusService, type GpuInventory } from './gpus/gpus.service.js';
import { COMPUTE_TURNS } from './limits/limits-file.js';
import type { AgentLink } from './link/agent-link.js';
import { AgentLinkServer } from './link/agent-link-server.js';
import { NatsAgentLink } from './link/nats-agent-link.js';
import { createLogger, PinoNestLogger } from './logging/logger.js';
import { AgentMetrics } from './metrics/agent-metrics.js';
import { MetricsHttpServer } from './metrics/metrics-http.js';
import { AgentService } from './reconcile/agent.service.js';
import { HeartbeatService } from './reconcile/heartbeat.service.js';

/** A running agent. */
export interface Agent {
  readonly hostId: string;
  readonly inventory: GpuInventory;
  /** Runs one reconcile round now (tests, operators); the timer keeps its own pace. */
  reconcileNow(): Promise<void>;
  /** Sends one heartbeat now. */
  heartbeatNow(): Promise<void>;
  /** The agent's metrics in Prometheus text (what GPUSHARDS_METRICS_LISTEN serves). */
  metrics(): Promise<string>;
  /** Where the metrics are served, when metricsListen was given (port 0 picks one). */
  metricsAddress(): { host: string; port: number } | undefined;
  /** Stops the agent; shard containers keep running and are adopted by the next start. */
  stop(): Promise<void>;
}

/**
 * Starts an agent (a NestJS microservice) in this process and resolves once it has registered with the control
 * plane. Used by main.ts (options from the environment), the one-box launcher (with an
 * in-process AgentLink) and tests. Throws on a configuration the agent cannot run with,
 * and when the control plane refuses the registration.
 */
export async function createAgent(options: AgentOptions): Promise<Agent> {
  const config = resolveConfig(options);
  const logger = createLogger(options.logLevel ?? 'info', config.hostId, options.logDestination);
  if (config.mps !== undefined && config.containers.user === undefined) {
    // The MPS control daemon serves one user id at a time: a client of another uid waits
    // until every client of the running server has exited.
    logger.warn(
      { mpsPipeDir: config.mps.pipeDir },
      'an MPS partition without GPUSHARDS_CONTAINER_USER: shards whose images run as different users will wait for one another on the MPS server',
    );
  }
  const link: AgentLink =
    'custom' in options.link
      ? options.link.custom
      : new NatsAgentLink(config.hostId, options.link.nats, logger.child({ module: 'link' }));
  const docker = options.docker ?? new Docker();
  let app: INestMicroservice | undefined;
  try {
    // A NestJS microservice: its transport (AgentLinkServer) is the link, connected once the
    // modules are up (the shard containers here adopted), and its @MessagePattern handlers
    // (CommandsController) answer the control plane's commands.
    app = await NestFactory.createMicroservice(AgentModule.forRoot(config, link, docker, logger), {
      strategy: new AgentLinkServer(link),
      logger: new PinoNestLogger(logger.child({ module: 'nest' })),
      abortOnError: false,
    });
    await app.listen();
    const service = app.get(AgentService);
    await service.start();
    const context = app;
    let stopped: Promise<void> | undefined;
    return {
      hostId: config.hostId,
      inventory: app.get(GpusService).inventory,
      reconcileNow: () => context.get(AgentService).reconcile(),
      heartbeatNow: () => context.get(HeartbeatService).beat(),
      metrics: () => context.get(AgentMetrics).text(),
      metricsAddress: () => context.get(MetricsHttpServer).address(),
      stop: () => {
        stopped ??= service.stop().finally(() => context.close());
        return stopped;
      },
    };
  } catch (error) {
    await link.close().catch(() => undefined);
    await app?.close().catch(() => undefined);
    throw error;
  }
}

function resolveConfig(options: AgentOptions): AgentConfig {
  assertValidHostId(options.hostId);
  const positive = (name: string, value: number | undefined, fallback: number): number => {
    const chosen = value ?? fallback;
    if (!Number.isFinite(chosen) || chosen <= 0)
      throw new RangeError(`${name} must be more than 0, got ${chosen}`);
    return chosen;
  };
  const stopGraceSeconds = options.stopGraceSeconds ?? DEFAULTS.stopGraceSeconds;
  if (!Number.isInteger(stopGraceSeconds) || stopGraceSeconds < 0 || stopGraceSeconds > 600) {
    throw new RangeError(
      `stopGraceSeconds must be a whole number from 0 to 600, got ${stopGraceSeconds}`,
    );
  }
  if (options.gpus.kind === 'simulated' && options.gpus.gpus.length === 0) {
    throw new RangeError('simulated GPUs: give at least one');
  }
  const computeTurns = options.computeTurns ?? DEFAULTS.computeTurns;
  if (!COMPUTE_TURNS.includes(computeTurns)) {
    throw new RangeError(
      `computeTurns must be ${COMPUTE_TURNS.join(' or ')}, got ${JSON.stringify(computeTurns)}`,
    );
  }
  const stateDir = resolve(options.stateDir);
  return {
    hostId: options.hostId,
    hostName: options.hostName ?? hostname(),
    labels: options.labels ?? {},
    gpus: options.gpus,
    interposerPath: resolve(options.interposerPath),
    stateDir,
    regionRoot: resolve(options.regionRoot ?? `${stateDir}/regions`),
    ...(options.computeLedgerDir !== undefined
      ? { computeLedgerDir: resolve(options.computeLedgerDir) }
      : {}),
    computeTurns,
    ...(options.mps !== undefined
      ? {
          mps: checkMpsPartition({
            pipeDir: resolve(options.mps.pipeDir),
            isolatedPercent: options.mps.isolatedPercent,
          }),
        }
      : {}),
    heartbeatSeconds: positive(
      'heartbeatSeconds',
      options.heartbeatSeconds,
      DEFAULTS.heartbeatSeconds,
    ),
    reconcileSeconds: positive(
      'reconcileSeconds',
      options.reconcileSeconds,
      DEFAULTS.reconcileSeconds,
    ),
    stopGraceSeconds,
    ...(options.contextOverheadBytes !== undefined
      ? { contextOverheadBytes: options.contextOverheadBytes }
      : {}),
    enforcement: resolveEnforcement(options.enforcement),
    computeFence: resolveComputeFence(options.computeFence),
    containers: resolveContainers(options.containers),
    suspendBudgetBytes: resolveSuspendBudget(options.suspendBudget),
    ...(options.metricsListen !== undefined
      ? { metricsListen: resolveListen(options.metricsListen) }
      : {}),
  };
}

/** Bytes of host RAM for suspended shards: a size as given, or a percent of MemTotal. */
export function resolveSuspendBudget(
  budget: AgentOptions['suspendBudget'] = { percentOfRam: DEFAULTS.suspendBudgetPercentOfRam },
  hostBytes = totalmem(),
): number {
  if ('bytes' in budget) {
    if (!Number.isSafeInteger(budget.bytes) || budget.bytes < 0) {
      throw new RangeError(
        `suspendBudget.bytes must be a whole number of bytes, got ${budget.bytes}`,
      );
    }
    return budget.bytes;
  }
  if (
    !Number.isFinite(budget.percentOfRam) ||
    budget.percentOfRam < 0 ||
    budget.percentOfRam > 100
  ) {
    throw new RangeError(
      `suspendBudget.percentOfRam must be from 0 to 100, got ${budget.percentOfRam}`,
    );
  }
  return Math.floor((hostBytes * budget.percentOfRam) / 100);
}

function resolveListen(
  listen: NonNullable<AgentOptions['metricsListen']>,
): NonNullable<AgentConfig['metricsListen']> {
  if (!Number.isInteger(listen.port) || listen.port < 0 || listen.port > 65_535) {
    throw new RangeError(`metricsListen.port must be 0 to 65535, got ${listen.port}`);
  }
  if (listen.host.length === 0) throw new RangeError('metricsListen.host must not be empty');
  return { host: listen.host, port: listen.port };
}

function resolveEnforcement(options: AgentOptions['enforcement'] = {}): AgentConfig['enforcement'] {
  const intervalMs = options.intervalMs ?? DEFAULTS.enforcementIntervalMs;
  if (!Number.isInteger(intervalMs) || intervalMs < 0 || intervalMs > 60_000) {
    throw new RangeError(
      `enforcement.intervalMs must be a whole number of milliseconds from 0 (off) to 60000, got ${intervalMs}`,
    );
  }
  const toleranceBytes = options.toleranceBytes ?? DEFAULTS.capToleranceBytes;
  if (!Number.isSafeInteger(toleranceBytes) || toleranceBytes < 0) {
    throw new RangeError(
      `enforcement.toleranceBytes must be a whole number of bytes, got ${toleranceBytes}`,
    );
  }
  return {
    intervalMs,
    toleranceBytes,
    allowedProcesses: [...(options.allowedProcesses ?? [])],
    procRoot: options.procRoot ?? '/proc',
  };
}

function resolveComputeFence(
  options: AgentOptions['computeFence'] = {},
): AgentConfig['computeFence'] {
  const windowSeconds = options.windowSeconds ?? DEFAULTS.computeFenceSeconds;
  if (
    !Number.isFinite(windowSeconds) ||
    (windowSeconds !== 0 && (windowSeconds < 1 || windowSeconds > 3600))
  ) {
    throw new RangeError(
      `computeFence.windowSeconds must be 0 (off) or from 1 to 3600 seconds, got ${windowSeconds}`,
    );
  }
  const thresholdPercent = options.thresholdPercent ?? DEFAULTS.computeFenceThresholdPercent;
  if (!Number.isFinite(thresholdPercent) || thresholdPercent <= 0 || thresholdPercent > 100) {
    throw new RangeError(
      `computeFence.thresholdPercent must be more than 0 and at most 100, got ${thresholdPercent}`,
    );
  }
  return { windowSeconds, thresholdPercent };
}

function resolveContainers(options: AgentOptions['containers'] = {}): AgentConfig['containers'] {
  const pidsLimit = options.pidsLimit ?? DEFAULTS.pidsLimit;
  if (!Number.isInteger(pidsLimit) || pidsLimit < 16) {
    throw new RangeError(
      `containers.pidsLimit must be a whole number of at least 16, got ${pidsLimit}`,
    );
  }
  if (options.user !== undefined && !/^\d{1,10}(:\d{1,10})?$/.test(options.user)) {
    throw new RangeError(
      `containers.user must be a numeric uid or uid:gid (names depend on each image), got ${JSON.stringify(options.user)}`,
    );
  }
  return { pidsLimit, ...(options.user !== undefined ? { user: options.user } : {}) };
}
