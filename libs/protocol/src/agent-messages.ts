/**
 * What an agent sends the control plane, one section per subject: register (request/reply, on
 * start and after losing the link), heartbeat (publish), state (publish, per shard state change)
 * and reconcile (request/reply, periodically), then AGENT_MESSAGE_SCHEMAS, which maps each
 * subject to its request. Separate from command-messages.ts, the other direction.
 */
import { z } from 'zod';

import {
  bytesSchema,
  containerIdSchema,
  envelope,
  errorSchema,
  eventIdSchema,
  gpuUuidSchema,
  shardIdSchema,
  textSchema,
  timestampSchema,
  uniqueBy,
} from './primitives.js';
import {
  CONTAINER_STATUSES,
  MAX_GPUS_PER_HOST,
  MAX_SHARDS_PER_HOST,
  acceptsKeptShards,
  capPolicySchema,
  desiredStateFields,
  memoryResidencySchema,
  shardStateSchema,
} from './shard-spec.js';

// Objects are z.object: unknown fields are tolerated and dropped, so a newer peer may add
// optional fields without breaking an older one. Unknown enum values and command types
// are refused. See README.md, "Versioning".

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
  /**
   * Elastic memory (docs/elastic.md): how much host RAM this host lets suspended shards' GPU
   * memory take, by their caps. Absent or 0: the host does not suspend (its driver lacks the
   * checkpoint API, or its operator turned suspends off); `suspendUnavailableReason` says why.
   */
  suspendBudgetBytes: bytesSchema.optional(),
  suspendUnavailableReason: textSchema(1024).optional(),
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
  /**
   * Where its running container's GPU memory is (docs/elastic.md; absent: resident, or an agent
   * that does not suspend): a shard lost while suspended comes back SUSPENDED, not RUNNING.
   */
  memory: memoryResidencySchema.optional(),
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

/**
 * A pressure ring (issue #31): libvgpu.so in `shardId` found the driver out of memory that the
 * shard's budget allows on `gpuUuid` (someone else holds memory past what placement promised),
 * and the fence sampled that GPU at once. `reliefSeconds`: from the ring to the memory of the
 * processes the fence killed for it being gone; absent when the fence found no process past its
 * cap there (the shortage is memory it does not judge, such as a process of no shard).
 */
export const pressureReliefSchema = z.object({
  shardId: shardIdSchema,
  gpuUuid: gpuUuidSchema,
  /** When libvgpu.so rang. */
  at: timestampSchema,
  reliefSeconds: z.number().min(0).optional(),
  /** What the fence killed on that GPU after the ring. */
  killedPids: z.array(z.int().min(1)).max(4096),
});
export type PressureReliefMessage = z.infer<typeof pressureReliefSchema>;

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
          /** Where its GPU memory is (absent: an agent that does not suspend, so resident). */
          memory: memoryResidencySchema.optional(),
          /** What its processes hold in host RAM for their GPU memory while suspended. */
          suspendedBytes: bytesSchema.optional(),
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
    /** Pressure rings settled since the last heartbeat, and how long each took to relieve. */
    pressureReliefs: z.array(pressureReliefSchema).max(MAX_SHARDS_PER_HOST).optional(),
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
    /** Image pull progress, with PULLING; memory moved so far, with SUSPENDING and RESUMING. */
    progress: z
      .object({
        completedBytes: bytesSchema,
        totalBytes: bytesSchema.optional(),
      })
      .optional(),
    /** With SUSPENDED and RESUMED: what the move took. */
    moved: z
      .object({
        /** GPU memory moved, summed over the container's CUDA processes and GPUs. */
        bytes: bytesSchema,
        /** From the first lock (or restore) to the last checkpoint (or unlock). */
        seconds: z.number().min(0),
        /** CUDA processes moved. */
        processes: z.int().min(0),
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
          /** With status running or paused: where its GPU memory is (absent: resident). */
          memory: memoryResidencySchema.optional(),
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
// wake: agent -> control plane, plain publish, when a process of a suspended shard asks for
// the GPU (libvgpu.so rang its region's wake bell).

export const shardWakeSchema = z
  .object({
    ...envelope,
    shardId: shardIdSchema,
    /** When the first ring the agent saw since the shard was suspended happened. */
    at: timestampSchema,
    /** Rings counted so far (the region's wake_requests): repeats of one wake carry more. */
    requests: z.int().min(1),
  })
  .describe('shard wake request');
export type ShardWake = z.infer<typeof shardWakeSchema>;

/** The schema of the message each agent subject carries (requests; replies are above). */
export const AGENT_MESSAGE_SCHEMAS = {
  register: registerRequestSchema,
  heartbeat: heartbeatSchema,
  state: shardStateEventSchema,
  reconcile: reconcileRequestSchema,
  wake: shardWakeSchema,
} as const;
