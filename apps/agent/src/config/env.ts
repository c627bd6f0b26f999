import { hostname } from 'node:os';
import { resolve } from 'node:path';

import { parseSize } from '@gpushards/limits';
import {
  formatIssues,
  hostIdSchema,
  hostInfoSchema,
  readEnvVariables,
  readNatsAuth,
} from '@gpushards/protocol';
import { z } from 'zod';

import { mpsPipeDirProblem, type MpsPartition } from '../compute/mps-partition.js';
import { parseSimulatedGpus, SimulatedGpuSpecError } from '../gpus/simulated-gpus.js';
import { COMPUTE_TURNS } from '../limits/limits-file.js';
import { DEFAULTS, type AgentOptions } from './agent-options.js';

export class ConfigError extends Error {
  override name = 'ConfigError';
}

const seconds = (max: number) =>
  z
    .string()
    .regex(/^\d+(\.\d+)?$/, `must be a number of seconds, like 10`)
    .transform(Number)
    .refine((value) => value > 0 && value <= max, `must be more than 0 and at most ${max}`);

const path = z.string().min(1);

const envSchema = z.object({
  GPUSHARDS_HOST_ID: hostIdSchema,
  GPUSHARDS_HOST_NAME: z.string().max(256).optional(),
  GPUSHARDS_HOST_LABELS: z
    .string()
    .regex(
      /^[^=,]+=[^,]*(,[^=,]+=[^,]*)*$/,
      'must be key=value pairs separated by commas, like zone=dc1,tier=a100',
    )
    .optional(),
  GPUSHARDS_NATS_URL: z
    .string()
    .regex(
      /^(nats|tls|wss?):\/\/[^\s,]+(,(nats|tls|wss?):\/\/[^\s,]+)*$/,
      'must be one or more nats://host:port URLs separated by commas',
    )
    .default(DEFAULTS.natsUrl),
  GPUSHARDS_NATS_USER: z.string().optional(),
  GPUSHARDS_NATS_PASSWORD: z.string().optional(),
  GPUSHARDS_NATS_NKEY_SEED_FILE: path.optional(),
  GPUSHARDS_NATS_CREDS: path.optional(),
  GPUSHARDS_NATS_TIMEOUT_SECONDS: seconds(300).optional(),
  GPUSHARDS_NVML_LIBRARY: path.default(DEFAULTS.nvmlLibrary),
  GPUSHARDS_CUDA_LIBRARY: path.default(DEFAULTS.cudaLibrary),
  GPUSHARDS_SIMULATE_GPUS: z.string().optional(),
  GPUSHARDS_FAKE_LIBRARY_DIR: path.optional(),
  GPUSHARDS_CONTEXT_OVERHEAD: z.string().optional(),
  GPUSHARDS_INTERPOSER_PATH: path.default(DEFAULTS.interposerPath),
  GPUSHARDS_STATE_DIR: path.default(DEFAULTS.stateDir),
  GPUSHARDS_REGION_ROOT: path.optional(),
  GPUSHARDS_COMPUTE_LEDGER_DIR: path.optional(),
  GPUSHARDS_COMPUTE_TURNS: z
    .enum(COMPUTE_TURNS, {
      error: 'must be cpu or gpu (where every shard of this host waits for its compute turns)',
    })
    .default(DEFAULTS.computeTurns),
  GPUSHARDS_MPS_PIPE_DIR: path.optional(),
  GPUSHARDS_MPS_ISOLATED_PERCENT: z
    .string()
    .regex(/^\d+$/, 'must be a whole percent from 1 to 90, like 40')
    .transform(Number)
    .refine((value) => value >= 1 && value <= 90, 'must be a whole percent from 1 to 90')
    .optional(),
  GPUSHARDS_HEARTBEAT_SECONDS: seconds(3600).default(DEFAULTS.heartbeatSeconds),
  GPUSHARDS_RECONCILE_SECONDS: seconds(3600).default(DEFAULTS.reconcileSeconds),
  GPUSHARDS_STOP_GRACE_SECONDS: seconds(600).default(DEFAULTS.stopGraceSeconds),
  GPUSHARDS_SAMPLE_MS: z
    .string()
    .regex(/^\d+$/, 'must be a whole number of milliseconds, like 250 (0 turns sampling off)')
    .transform(Number)
    .refine((value) => value <= 60_000, 'must be at most 60000')
    .optional(),
  GPUSHARDS_CAP_TOLERANCE: z.string().optional(),
  GPUSHARDS_COMPUTE_FENCE_SECONDS: z
    .string()
    .regex(/^\d+(\.\d+)?$/, 'must be a number of seconds, like 5 (0 turns the compute fence off)')
    .transform(Number)
    .refine(
      (value) => value === 0 || (value >= 1 && value <= 3600),
      'must be 0 (the compute fence off) or from 1 to 3600 seconds',
    )
    .optional(),
  GPUSHARDS_GPU_ALLOWED_PROCESSES: z
    .string()
    .regex(
      /^[^,\s]{1,15}(,[^,\s]{1,15})*$/,
      'must be process names (1-15 characters, as /proc/<pid>/comm shows them) separated by commas, like Xorg,nvidia-smi',
    )
    .optional(),
  GPUSHARDS_CONTAINER_USER: z
    .string()
    .regex(/^\d{1,10}(:\d{1,10})?$/, 'must be a numeric uid or uid:gid, like 1000:1000')
    .optional(),
  GPUSHARDS_CONTAINER_PIDS_LIMIT: z
    .string()
    .regex(/^\d+$/, 'must be a whole number, like 4096')
    .transform(Number)
    .refine((value) => value >= 16, 'must be at least 16')
    .optional(),
  GPUSHARDS_SUSPEND_BUDGET: z.string().optional(),
  GPUSHARDS_METRICS_LISTEN: z
    .string()
    .regex(
      /^(\[[0-9a-fA-F:.]+\]|[A-Za-z0-9.-]+):\d{1,5}$/,
      'must be host:port, like 127.0.0.1:9464 ([::1]:9464 for IPv6)',
    )
    .refine((value) => Number(value.slice(value.lastIndexOf(':') + 1)) <= 65_535, {
      message: 'must have a port of at most 65535',
    })
    .optional(),
  GPUSHARDS_LOG_LEVEL: z
    .enum(['fatal', 'error', 'warn', 'info', 'debug', 'trace', 'silent'])
    .default('info'),
});

const REQUIRED_HINTS: Record<string, string> = {
  GPUSHARDS_HOST_ID: 'this host\'s id, 1-64 characters of A-Z, a-z, 0-9, "_" and "-"',
};

/** Variables that hold secrets: never echoed in an error. */
const SECRET = new Set(['GPUSHARDS_NATS_PASSWORD']);

/**
 * Reads the agent's configuration from GPUSHARDS_* variables (docs/agent.md lists them).
 * Empty variables count as unset. Throws ConfigError naming every bad variable.
 */
export function agentOptionsFromEnv(env: NodeJS.ProcessEnv = process.env): AgentOptions {
  const { values: vars, problems } = readEnvVariables(envSchema, env, {
    secret: SECRET,
    requiredHint: (name) => REQUIRED_HINTS[name] ?? 'see docs/agent.md',
  });
  if (vars === undefined) {
    throw new ConfigError(`invalid agent configuration:\n  ${problems.join('\n  ')}`);
  }
  const auth = readNatsAuth(vars, (path) => resolve(path), problems);
  let gpus: AgentOptions['gpus'] = {
    kind: 'nvml',
    nvmlLibrary: vars.GPUSHARDS_NVML_LIBRARY,
    cudaLibrary: vars.GPUSHARDS_CUDA_LIBRARY,
  };
  if (vars.GPUSHARDS_SIMULATE_GPUS !== undefined) {
    try {
      gpus = {
        kind: 'simulated',
        gpus: parseSimulatedGpus(vars.GPUSHARDS_SIMULATE_GPUS),
        ...(vars.GPUSHARDS_FAKE_LIBRARY_DIR
          ? { fakeLibraryDir: resolve(vars.GPUSHARDS_FAKE_LIBRARY_DIR) }
          : {}),
      };
    } catch (error) {
      if (!(error instanceof SimulatedGpuSpecError)) throw error;
      problems.push(`GPUSHARDS_SIMULATE_GPUS: ${error.message}`);
    }
  } else if (vars.GPUSHARDS_FAKE_LIBRARY_DIR !== undefined) {
    problems.push('GPUSHARDS_FAKE_LIBRARY_DIR is only used with GPUSHARDS_SIMULATE_GPUS');
  }
  const labels = parseLabels(vars.GPUSHARDS_HOST_LABELS);
  const labelCheck = hostInfoSchema.shape.labels.safeParse(labels);
  if (!labelCheck.success) {
    problems.push(`GPUSHARDS_HOST_LABELS: ${formatIssues(labelCheck.error.issues)}`);
  }
  let contextOverheadBytes: number | undefined;
  if (vars.GPUSHARDS_CONTEXT_OVERHEAD !== undefined) {
    const size = parseSize(vars.GPUSHARDS_CONTEXT_OVERHEAD);
    if (size.ok) contextOverheadBytes = size.bytes;
    else problems.push(`GPUSHARDS_CONTEXT_OVERHEAD: ${size.error.message}`);
  }
  let toleranceBytes: number | undefined;
  if (vars.GPUSHARDS_CAP_TOLERANCE !== undefined) {
    const size = parseSize(vars.GPUSHARDS_CAP_TOLERANCE);
    if (size.ok) toleranceBytes = size.bytes;
    else problems.push(`GPUSHARDS_CAP_TOLERANCE: ${size.error.message}`);
  }
  const mps = readMpsPartition(vars, problems);
  const suspendBudget = readSuspendBudget(vars.GPUSHARDS_SUSPEND_BUDGET, problems);
  if (problems.length > 0) {
    throw new ConfigError(`invalid agent configuration:\n  ${problems.join('\n  ')}`);
  }
  const stateDir = resolve(vars.GPUSHARDS_STATE_DIR);
  return {
    hostId: vars.GPUSHARDS_HOST_ID,
    hostName: vars.GPUSHARDS_HOST_NAME ?? hostname(),
    labels,
    link: {
      nats: {
        servers: vars.GPUSHARDS_NATS_URL.split(','),
        ...(auth ? { auth } : {}),
        ...(vars.GPUSHARDS_NATS_TIMEOUT_SECONDS
          ? { requestTimeoutMs: vars.GPUSHARDS_NATS_TIMEOUT_SECONDS * 1000 }
          : {}),
      },
    },
    gpus,
    interposerPath: resolve(vars.GPUSHARDS_INTERPOSER_PATH),
    stateDir,
    regionRoot: resolve(vars.GPUSHARDS_REGION_ROOT ?? `${stateDir}/regions`),
    ...(vars.GPUSHARDS_COMPUTE_LEDGER_DIR
      ? { computeLedgerDir: resolve(vars.GPUSHARDS_COMPUTE_LEDGER_DIR) }
      : {}),
    computeTurns: vars.GPUSHARDS_COMPUTE_TURNS,
    ...(mps !== undefined ? { mps } : {}),
    heartbeatSeconds: vars.GPUSHARDS_HEARTBEAT_SECONDS,
    reconcileSeconds: vars.GPUSHARDS_RECONCILE_SECONDS,
    stopGraceSeconds: vars.GPUSHARDS_STOP_GRACE_SECONDS,
    ...(contextOverheadBytes !== undefined ? { contextOverheadBytes } : {}),
    logLevel: vars.GPUSHARDS_LOG_LEVEL,
    enforcement: {
      ...(vars.GPUSHARDS_SAMPLE_MS !== undefined ? { intervalMs: vars.GPUSHARDS_SAMPLE_MS } : {}),
      ...(toleranceBytes !== undefined ? { toleranceBytes } : {}),
      ...(vars.GPUSHARDS_GPU_ALLOWED_PROCESSES !== undefined
        ? { allowedProcesses: vars.GPUSHARDS_GPU_ALLOWED_PROCESSES.split(',') }
        : {}),
    },
    ...(vars.GPUSHARDS_COMPUTE_FENCE_SECONDS !== undefined
      ? { computeFence: { windowSeconds: vars.GPUSHARDS_COMPUTE_FENCE_SECONDS } }
      : {}),
    ...(suspendBudget !== undefined ? { suspendBudget } : {}),
    ...(vars.GPUSHARDS_METRICS_LISTEN !== undefined
      ? { metricsListen: parseListen(vars.GPUSHARDS_METRICS_LISTEN) }
      : {}),
    containers: {
      ...(vars.GPUSHARDS_CONTAINER_USER !== undefined
        ? { user: vars.GPUSHARDS_CONTAINER_USER }
        : {}),
      ...(vars.GPUSHARDS_CONTAINER_PIDS_LIMIT !== undefined
        ? { pidsLimit: vars.GPUSHARDS_CONTAINER_PIDS_LIMIT }
        : {}),
    },
  };
}

/**
 * The host's MPS partition: both settings or neither, and a pipe folder where the MPS control
 * daemon runs (its `control` socket is there), checked now so that a host never registers a
 * partition it does not have.
 */
function readMpsPartition(
  vars: { GPUSHARDS_MPS_PIPE_DIR?: string; GPUSHARDS_MPS_ISOLATED_PERCENT?: number },
  problems: string[],
): MpsPartition | undefined {
  const pipeDir = vars.GPUSHARDS_MPS_PIPE_DIR;
  const percent = vars.GPUSHARDS_MPS_ISOLATED_PERCENT;
  if (pipeDir === undefined && percent === undefined) return undefined;
  if (pipeDir === undefined || percent === undefined) {
    problems.push(
      `GPUSHARDS_MPS_PIPE_DIR and GPUSHARDS_MPS_ISOLATED_PERCENT go together: set both (the MPS control daemon's pipe folder and the percent of every GPU kept for isolated shards) or neither; only ${pipeDir === undefined ? 'GPUSHARDS_MPS_ISOLATED_PERCENT' : 'GPUSHARDS_MPS_PIPE_DIR'} is set`,
    );
    return undefined;
  }
  const folder = resolve(pipeDir);
  const problem = mpsPipeDirProblem(folder);
  if (problem !== undefined) {
    problems.push(`GPUSHARDS_MPS_PIPE_DIR: ${problem}`);
    return undefined;
  }
  return { pipeDir: folder, isolatedPercent: percent };
}

/** `50%` (of the host's RAM, 0-100), a size (`64g`), or 0 (suspends off). */
function readSuspendBudget(
  text: string | undefined,
  problems: string[],
): AgentOptions['suspendBudget'] {
  if (text === undefined) return undefined;
  if (/^0+$/.test(text.trim())) return { bytes: 0 };
  const percent = /^(\d+(\.\d+)?)%$/.exec(text.trim());
  if (percent !== null) {
    const value = Number(percent[1]);
    if (value <= 100) return { percentOfRam: value };
    problems.push(
      `GPUSHARDS_SUSPEND_BUDGET: a percent of the host's RAM is at most 100%, got ${text}`,
    );
    return undefined;
  }
  const size = parseSize(text);
  if (size.ok) return { bytes: size.bytes };
  problems.push(
    `GPUSHARDS_SUSPEND_BUDGET: must be a percent of the host's RAM (50%), a size (64g) or 0 (no suspends): ${size.error.message}`,
  );
  return undefined;
}

function parseListen(text: string): { host: string; port: number } {
  const at = text.lastIndexOf(':');
  return { host: text.slice(0, at).replace(/^\[(.*)\]$/, '$1'), port: Number(text.slice(at + 1)) };
}

function parseLabels(text: string | undefined): Record<string, string> {
  if (text === undefined) return {};
  return Object.fromEntries(
    text.split(',').map((pair) => {
      const at = pair.indexOf('=');
      return [pair.slice(0, at).trim(), pair.slice(at + 1).trim()];
    }),
  );
}
