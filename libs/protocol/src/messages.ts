import { z } from 'zod';

import { envSchema } from './env.js';
import {
  bytesSchema,
  commandIdSchema,
  containerIdSchema,
  envelope,
  errorSchema,
  eventIdSchema,
  gpuUuidSchema,
  positiveBytesSchema,
  shardIdSchema,
  teamIdSchema,
  textSchema,
  timestampSchema,
  uniqueBy,
} from './primitives.js';

// Objects are z.object: unknown fields are tolerated and dropped, so a newer peer may add
// optional fields without breaking an older one. Unknown enum values and command types
// are refused. See README.md, "Versioning".

export const SHARD_STATES = [
  'PULLING', // pulling the image; `progress` says how far
  'STARTING', // creating and starting the container
  'RUNNING',
  'EXITED', // the main process ended on its own; `exitCode` says how
  'FAILED', // the agent could not launch or keep it (pull, create, start); `reason` says why
  'STOPPED', // stopped by a stop command or reconciliation
  'VANISHED', // the container went away without the agent removing it
] as const;
export const shardStateSchema = z.enum(SHARD_STATES);

/** Docker's words for a container's state (State.Status). */
export const CONTAINER_STATUSES = [
  'created',
  'running',
  'paused',
  'restarting',
  'exited',
  'dead',
  'removing',
] as const;
export type ContainerStatus = (typeof CONTAINER_STATUSES)[number];
export type ShardState = z.infer<typeof shardStateSchema>;

export const MAX_GPUS_PER_HOST = 64;
export const MAX_SHARDS_PER_HOST = 1024;

// ---------------------------------------------------------------------------------------
// Shard launch spec: what a launch command carries and what a reconcile reply lists.

export const gpuLimitSchema = z.object({
  uuid: gpuUuidSchema,
  /** The cap the interposer enforces on this GPU, context included. */
  limitBytes: positiveBytesSchema,
});
export type GpuLimit = z.infer<typeof gpuLimitSchema>;

const gpuLimitsSchema = z
  .array(gpuLimitSchema)
  .min(1, 'a shard needs at least one GPU')
  .max(MAX_GPUS_PER_HOST)
  .superRefine(uniqueBy((gpu: GpuLimit) => gpu.uuid, 'GPU'));

export const MAX_COMMAND_ARGS = 256;
export const MAX_COMMAND_BYTES = 32 * 1024;
const utf8 = new TextEncoder();

const containerCommandSchema = z
  .array(z.string().refine((arg) => !arg.includes('\0'), 'command arguments cannot contain NUL'))
  .min(1, 'a command, when given, needs at least the program')
  .max(MAX_COMMAND_ARGS)
  .refine(
    (args) => args.reduce((sum, arg) => sum + utf8.encode(arg).length + 1, 0) <= MAX_COMMAND_BYTES,
    `the command must take at most ${MAX_COMMAND_BYTES} bytes`,
  );

export const imageReferenceSchema = z
  .string()
  .regex(/^[\x21-\x7e]{1,512}$/, 'an image reference must be 1-512 printable ASCII characters');

/**
 * What the agent does to a shard whose real GPU memory (NVML) passes its cap plus the host's
 * tolerance: kill its largest processes until it is back under, stop it, or report it.
 * The same names as libs/limits' CAP_POLICIES.
 */
export const CAP_POLICY_VALUES = ['kill', 'stop', 'report'] as const;
export const capPolicySchema = z.enum(CAP_POLICY_VALUES);
export type CapPolicyValue = z.infer<typeof capPolicySchema>;

/**
 * A shard's compute share on each of its GPUs (docs/compute.md): permille of the GPU's time,
 * 0 = none asked (an equal split of what the shares leave); guaranteed (at least its share,
 * and idle time beyond it) or capped (never more). The agent writes it into the shard's limits
 * file, where libvgpu.so reads it at the shard's next turn.
 *
 * isolated: the share is of the GPU's SMs, in the MPS partition the host keeps for such shards
 * (`HostInfo.isolatedComputePermille`): the shard takes no turns and no neighbour reaches its
 * SMs; never more than its share. Sent only to a host that reported a partition.
 */
export const COMPUTE_MODE_VALUES = ['guaranteed', 'capped', 'isolated'] as const;
export const computeShareSchema = z.object({
  sharePermille: z.int().min(0).max(1000),
  mode: z.enum(COMPUTE_MODE_VALUES),
});
export type ComputeShareSpec = z.infer<typeof computeShareSchema>;

export const shardLaunchSpecSchema = z.object({
  shardId: shardIdSchema,
  teamId: teamIdSchema,
  name: textSchema(128),
  image: imageReferenceSchema,
  /** Overrides the image's CMD; the image's entrypoint is kept. */
  command: containerCommandSchema.optional(),
  /** Reserved keys are stripped by the agent (see env.ts). */
  env: envSchema,
  gpus: gpuLimitsSchema,
  /** The per-GPU CUDA context size the control plane reserved for; informational for the agent. */
  contextOverheadBytes: bytesSchema.optional(),
  /** The shard's cap policy (its team's, else the fleet's); absent = kill. */
  capPolicy: capPolicySchema.optional(),
  /** Its compute share on every GPU; absent = none asked (as sharePermille 0). */
  compute: computeShareSchema.optional(),
});
export type ShardLaunchSpec = z.infer<typeof shardLaunchSpecSchema>;

/**
 * The level-triggered answer to "what should run here": shards in `desired` must run
 * with that spec; shards in `stoppedShardIds` must stay stopped (containers kept);
 * shards in `keptShardIds` are left as they are; any other labelled container is stopped and
 * removed.
 */
const desiredStateFields = {
  desired: z
    .array(shardLaunchSpecSchema)
    .max(MAX_SHARDS_PER_HOST)
    .superRefine(uniqueBy((spec: ShardLaunchSpec) => spec.shardId, 'shard')),
  stoppedShardIds: z.array(shardIdSchema).max(MAX_SHARDS_PER_HOST),
  /**
   * Shards that should run but whose launch spec the control plane cannot give (a secret env
   * value sealed with a key it does not hold): not launched, caps not rewritten, not stopped,
   * not removed. Sent only to an agent whose request said `acceptsKeptShards`: an older agent
   * would drop the field and remove them.
   */
  keptShardIds: z.array(shardIdSchema).max(MAX_SHARDS_PER_HOST).optional(),
};

/** In a register or reconcile request: the agent honours a reply's `keptShardIds`. */
const acceptsKeptShards = z.boolean().optional();

// ---------------------------------------------------------------------------------------
// register: agent -> control plane, request/reply, on start and after losing the link.

export const hostInfoSchema = z.object({
  hostId: envelope.hostId,
  name: textSchema(256),
  labels: z.record(
    z
      .string()
      .regex(
        /^[A-Za-z0-9][A-Za-z0-9._/-]{0,127}$/,
        'label keys must be 1-128 characters of A-Z a-z 0-9 . _ / -, starting with a letter or digit',
      ),
    z.string().max(256, 'label values must be at most 256 characters'),
  ),
  agentVersion: textSchema(64),
  driverVersion: textSchema(64),
  cudaVersion: textSchema(64),
  /** True when the GPUs are the simulated ones (fake driver libraries), never for real work. */
  simulated: z.boolean(),
  /** Measured size of one CUDA context on this host's GPUs. */
  contextOverheadBytes: bytesSchema,
  /**
   * The part of every GPU of this host, in permille, that runs MPS clients for isolated
   * shards only (the host's MPS partition, docs/compute.md); every other shard of the host is
   * an MPS client at the remaining 1000 − this. Absent or 0: the host runs no MPS partition and
   * takes no isolated shard.
   */
  isolatedComputePermille: z.int().min(0).max(900).optional(),
});
export type HostInfo = z.infer<typeof hostInfoSchema>;

export const gpuInfoSchema = z.object({
  uuid: gpuUuidSchema,
  index: z
    .int()
    .min(0)
    .max(MAX_GPUS_PER_HOST - 1),
  model: textSchema(128),
  totalBytes: bytesSchema,
  usedBytes: bytesSchema,
});
export type GpuInfo = z.infer<typeof gpuInfoSchema>;

export const runningShardSchema = z.object({
  shardId: shardIdSchema,
  containerId: containerIdSchema,
  state: shardStateSchema,
});
export type RunningShard = z.infer<typeof runningShardSchema>;

export const registerRequestSchema = z
  .object({
    ...envelope,
    host: hostInfoSchema,
    gpus: z
      .array(gpuInfoSchema)
      .max(MAX_GPUS_PER_HOST)
      .superRefine(uniqueBy((gpu: GpuInfo) => gpu.uuid, 'GPU'))
      .superRefine(uniqueBy((gpu: GpuInfo) => gpu.index, 'GPU index')),
    runningShards: z.array(runningShardSchema).max(MAX_SHARDS_PER_HOST),
    acceptsKeptShards,
  })
  .refine((request) => request.host.hostId === request.hostId, {
    message: 'host.hostId must equal hostId',
    path: ['host', 'hostId'],
  })
  .describe('register request');
export type RegisterRequest = z.infer<typeof registerRequestSchema>;

/** Codes a register rejection may carry; receivers treat unknown codes as a rejection too. */
export const REGISTER_REJECTION_CODES = {
  /** Another live agent holds this host id. */
  HOST_ID_IN_USE: 'HOST_ID_IN_USE',
  /** An operator removed or disabled this host. */
  HOST_DISABLED: 'HOST_DISABLED',
  /** The agent is too old or too new for this control plane. */
  AGENT_UNSUPPORTED: 'AGENT_UNSUPPORTED',
  /** Simulated GPUs are not accepted by this control plane. */
  SIMULATED_NOT_ALLOWED: 'SIMULATED_NOT_ALLOWED',
} as const;

export const registerReplySchema = z
  .discriminatedUnion('accepted', [
    z.object({ ...envelope, accepted: z.literal(true), ...desiredStateFields }),
    z.object({ ...envelope, accepted: z.literal(false), error: errorSchema }),
  ])
  .describe('register reply');
export type RegisterReply = z.infer<typeof registerReplySchema>;

// ---------------------------------------------------------------------------------------
// heartbeat: agent -> control plane, plain publish every few seconds.

/** A shard's real GPU memory passed its cap + tolerance and the agent applied its policy. */
export const capViolationSchema = z.object({
  shardId: shardIdSchema,
  gpuUuid: gpuUuidSchema,
  /** What the shard's processes held on that GPU (NVML). */
  realBytes: bytesSchema,
  capBytes: bytesSchema,
  toleranceBytes: bytesSchema,
  action: capPolicySchema,
  /** The process holding the most there. */
  pid: z.int().min(1),
  processBytes: bytesSchema,
  /** kill: the processes sent SIGKILL. */
  killedPids: z.array(z.int().min(1)).max(4096),
  /** Set when the action failed (e.g. the stop did not go through). */
  error: textSchema(4096).optional(),
  at: timestampSchema,
});
export type CapViolationMessage = z.infer<typeof capViolationSchema>;

/**
 * The compute fence: a shard's processes kept a GPU busy (NVML's per-process utilization) in two
 * consecutive windows while its compute-ledger member there recorded no launch (work that
 * bypassed libvgpu.so), and the agent applied the shard's cap policy.
 */
export const ungovernedComputeSchema = z.object({
  shardId: shardIdSchema,
  gpuUuid: gpuUuidSchema,
  action: capPolicySchema,
  /** The busiest process whose samples passed the threshold, and its mean smUtil. */
  pid: z.int().min(1),
  smPercent: z.number().min(0).max(100),
  /** Every process of the shard whose samples passed the threshold there, busiest first. */
  pids: z.array(z.int().min(1)).max(4096),
  /** Its processes' mean smUtil there, summed (at most 100), over the window. */
  busyPercent: z.number().min(0).max(100),
  /** Samples of its processes in the window, and how many reached the threshold. */
  samples: z.int().min(0),
  busySamples: z.int().min(0),
  thresholdPercent: z.number().gt(0).max(100),
  windowSeconds: z.number().positive(),
  /** Seconds from its last launch through libvgpu.so on that GPU to the window's end; absent: none. */
  lastKernelSeconds: z.number().min(0).optional(),
  /** kill: the processes sent SIGKILL. */
  killedPids: z.array(z.int().min(1)).max(4096),
  /** Set when the action failed (e.g. the stop did not go through). */
  error: textSchema(4096).optional(),
  at: timestampSchema,
});
export type UngovernedComputeMessage = z.infer<typeof ungovernedComputeSchema>;

export const heartbeatSchema = z
  .object({
    ...envelope,
    sentAt: timestampSchema,
    /** Counts up from 0 for each agent process; a drop means the agent restarted. */
    sequence: z.int().min(0),
    gpus: z
      .array(
        z.object({
          uuid: gpuUuidSchema,
          usedBytes: bytesSchema,
          utilizationPercent: z.number().min(0).max(100).optional(),
        }),
      )
      .max(MAX_GPUS_PER_HOST),
    shards: z
      .array(
        z.object({
          shardId: shardIdSchema,
          /** Read from the shard's shared region: what the interposer has counted. */
          usedBytesPerGpu: z
            .array(z.object({ gpuUuid: gpuUuidSchema, usedBytes: bytesSchema }))
            .max(MAX_GPUS_PER_HOST),
          /**
           * What the shard's processes really hold per GPU (NVML, per process, summed by
           * cgroup); absent where the agent cannot sample (no driver lists processes).
           */
          realBytesPerGpu: z
            .array(z.object({ gpuUuid: gpuUuidSchema, realBytes: bytesSchema }))
            .max(MAX_GPUS_PER_HOST)
            .optional(),
          /**
           * GPU activity per GPU from the host's compute ledger (docs/compute.md): the share
           * of time the shard held the GPU since the last heartbeat, and seconds since its last
           * kernel launch; absent where the host has no ledger.
           */
          activityPerGpu: z
            .array(
              z.object({
                gpuUuid: gpuUuidSchema,
                busyRatio: z.number().min(0).max(1).optional(),
                lastKernelSeconds: z.number().min(0).optional(),
              }),
            )
            .max(MAX_GPUS_PER_HOST)
            .optional(),
        }),
      )
      .max(MAX_SHARDS_PER_HOST),
    /**
     * Memory held on each GPU by processes of no shard and not on the host's allow-list;
     * absent where the agent cannot sample, GPUs with none left out.
     */
    unattributedBytesPerGpu: z
      .array(z.object({ gpuUuid: gpuUuidSchema, bytes: bytesSchema }))
      .max(MAX_GPUS_PER_HOST)
      .optional(),
    /** Cap violations acted on since the last heartbeat (one is sent at once after each). */
    violations: z.array(capViolationSchema).max(MAX_SHARDS_PER_HOST).optional(),
    /** Ungoverned GPU work acted on since the last heartbeat (one is sent at once after each). */
    ungovernedCompute: z.array(ungovernedComputeSchema).max(MAX_SHARDS_PER_HOST).optional(),
  })
  .describe('heartbeat');
export type Heartbeat = z.infer<typeof heartbeatSchema>;

// ---------------------------------------------------------------------------------------
// state: agent -> control plane, plain publish on every shard state change.

export const shardStateEventSchema = z
  .object({
    ...envelope,
    /** Lets the control plane drop a duplicate. */
    eventId: eventIdSchema,
    shardId: shardIdSchema,
    state: shardStateSchema,
    containerId: containerIdSchema.optional(),
    exitCode: z.int().optional(),
    reason: textSchema(4096).optional(),
    /** When the agent saw the change; the control plane ignores events older than the last applied. */
    at: timestampSchema,
    /** Image pull progress, with PULLING. */
    progress: z
      .object({
        completedBytes: bytesSchema,
        totalBytes: bytesSchema.optional(),
      })
      .optional(),
  })
  .describe('shard state event');
export type ShardStateEvent = z.infer<typeof shardStateEventSchema>;

// ---------------------------------------------------------------------------------------
// reconcile: agent -> control plane, request/reply, periodically.

export const reconcileRequestSchema = z
  .object({
    ...envelope,
    /** Every container labelled as a shard that the agent finds, running or not. */
    containers: z
      .array(
        z.object({
          shardId: shardIdSchema,
          containerId: containerIdSchema,
          running: z.boolean(),
          /** Docker's state word when the agent looked (libs/limits' convergence table reads it). */
          status: z.enum(CONTAINER_STATUSES).optional(),
          /** With status `exited`. */
          exitCode: z.int().optional(),
          /** The agent is launching or stopping it: its outcome follows as events. */
          busy: z.boolean().optional(),
        }),
      )
      .max(MAX_SHARDS_PER_HOST),
    /**
     * When the agent looked at its containers; the control plane does not settle a shard from
     * this report when it applied an event of that shard at or after this time.
     */
    observedAt: timestampSchema.optional(),
    acceptsKeptShards,
  })
  .describe('reconcile request');
export type ReconcileRequest = z.infer<typeof reconcileRequestSchema>;

export const reconcileReplySchema = z
  .object({ ...envelope, ...desiredStateFields })
  .describe('reconcile reply');
export type ReconcileReply = z.infer<typeof reconcileReplySchema>;

// ---------------------------------------------------------------------------------------
// commands: control plane -> agent, request/reply on gpushards.host.<hostId>.cmd.

const commandHeader = { ...envelope, commandId: commandIdSchema };

export const launchCommandSchema = z.object({
  ...commandHeader,
  type: z.literal('launch'),
  shard: shardLaunchSpecSchema,
});
export const stopCommandSchema = z.object({
  ...commandHeader,
  type: z.literal('stop'),
  shardId: shardIdSchema,
  /** Seconds between SIGTERM and SIGKILL. */
  graceSeconds: z.int().min(0).max(600),
});
export const deleteCommandSchema = z.object({
  ...commandHeader,
  type: z.literal('delete'),
  shardId: shardIdSchema,
});
export const resizeCommandSchema = z.object({
  ...commandHeader,
  type: z.literal('resize'),
  shardId: shardIdSchema,
  /** The new caps, one per GPU of the shard. */
  gpus: gpuLimitsSchema,
  /** A new compute share on every GPU of the shard; absent = unchanged. */
  compute: computeShareSchema.optional(),
});

/**
 * Reconcile now instead of at the next period: a control plane that starts asks each agent,
 * since state events published while no control plane listened went to no one. An agent
 * older than this command refuses it (INVALID_COMMAND); its next period does the same.
 */
export const reconcileCommandSchema = z.object({
  ...commandHeader,
  type: z.literal('reconcile'),
});

export const COMMAND_TYPES = ['launch', 'stop', 'delete', 'resize', 'reconcile'] as const;
export type CommandType = (typeof COMMAND_TYPES)[number];

export const commandSchema = z
  .discriminatedUnion(
    'type',
    [
      launchCommandSchema,
      stopCommandSchema,
      deleteCommandSchema,
      resizeCommandSchema,
      reconcileCommandSchema,
    ],
    {
      error: (issue) =>
        issue.code === 'invalid_union'
          ? `unknown command type ${JSON.stringify(readType(issue.input))}: expected one of ${COMMAND_TYPES.join(', ')}`
          : undefined,
    },
  )
  .describe('command');
export type Command = z.infer<typeof commandSchema>;
export type LaunchCommand = z.infer<typeof launchCommandSchema>;
export type StopCommand = z.infer<typeof stopCommandSchema>;
export type DeleteCommand = z.infer<typeof deleteCommandSchema>;
export type ResizeCommand = z.infer<typeof resizeCommandSchema>;
export type ReconcileCommand = z.infer<typeof reconcileCommandSchema>;

function readType(input: unknown): unknown {
  return typeof input === 'object' && input !== null ? (input as { type?: unknown }).type : input;
}

/**
 * What a successful command did. A launch replies once the agent has taken it on (the
 * image pull may take minutes); how it ends arrives as state events.
 */
export const commandResultSchema = z.discriminatedUnion('type', [
  z.object({
    type: z.literal('launch'),
    state: shardStateSchema,
    containerId: containerIdSchema.optional(),
  }),
  z.object({ type: z.literal('stop'), wasRunning: z.boolean() }),
  z.object({ type: z.literal('delete'), removed: z.boolean() }),
  z.object({ type: z.literal('resize'), gpus: gpuLimitsSchema }),
  /** Taken on: the reconcile runs after the reply, as the periodic one does. */
  z.object({ type: z.literal('reconcile') }),
]);
export type CommandResult = z.infer<typeof commandResultSchema>;

/** Codes a failed command may carry; receivers treat unknown codes as failures too. */
export const COMMAND_ERROR_CODES = {
  /** The command could not be decoded (then `commandId` is null if it could not be read). */
  INVALID_COMMAND: 'INVALID_COMMAND',
  UNSUPPORTED_VERSION: 'UNSUPPORTED_VERSION',
  /** The command's hostId is not this agent's. */
  WRONG_HOST: 'WRONG_HOST',
  UNKNOWN_SHARD: 'UNKNOWN_SHARD',
  UNKNOWN_GPU: 'UNKNOWN_GPU',
  /** A resize would set a cap below what the shard already uses. */
  BELOW_USAGE: 'BELOW_USAGE',
  /** Docker refused or failed. */
  RUNTIME_ERROR: 'RUNTIME_ERROR',
  INTERNAL: 'INTERNAL',
} as const;

export const commandReplySchema = z
  .discriminatedUnion('ok', [
    z.object({ ...commandHeader, ok: z.literal(true), result: commandResultSchema }),
    z.object({
      ...envelope,
      /** null when the command was too malformed to read its id. */
      commandId: commandIdSchema.nullable(),
      ok: z.literal(false),
      error: errorSchema,
    }),
  ])
  .describe('command reply');
export type CommandReply = z.infer<typeof commandReplySchema>;

/** The schema of the message each agent subject carries (requests; replies are above). */
export const AGENT_MESSAGE_SCHEMAS = {
  register: registerRequestSchema,
  heartbeat: heartbeatSchema,
  state: shardStateEventSchema,
  reconcile: reconcileRequestSchema,
} as const;
