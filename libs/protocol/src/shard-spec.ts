/**
 * The shard vocabulary both directions share: a shard's states, Docker's container states, the
 * per-host maxima, and a shard's launch spec (image, command, env, GPUs and their caps, cap
 * policy, compute share) with the desired-state fields a register or reconcile reply lists.
 * Separate from the messages themselves (agent-messages.ts, command-messages.ts) because a
 * launch command and a reconcile reply both carry it. `gpuLimitsSchema`, `desiredStateFields`
 * and `acceptsKeptShards` are exported for those two files only: index.ts leaves them out.
 */
import { z } from 'zod';

import { envSchema } from './env.js';
import {
  bytesSchema,
  gpuUuidSchema,
  positiveBytesSchema,
  shardIdSchema,
  teamIdSchema,
  textSchema,
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
  // Elastic memory (docs/elastic.md): the container runs throughout; these say where its
  // processes' GPU memory is going or went. SUSPENDING and RESUMING carry `progress`.
  'SUSPENDING', // moving its GPU memory to host RAM
  'SUSPENDED', // all of it in host RAM (`moved` says how much and how long)
  'SUSPEND_FAILED', // could not; `reason` says why; its memory is back on the GPU
  'RESUMING', // moving it back
  'RESUMED', // all of it on the GPU again, its processes let go on (`moved`)
  'RESUME_FAILED', // could not; `reason` says why; its memory stays in host RAM
] as const;
export const shardStateSchema = z.enum(SHARD_STATES);

/**
 * Where a running container's GPU memory is, by the driver's checkpoint state of its CUDA
 * processes (libs/limits' OBSERVED_MEMORY): all on the GPU (or no CUDA process), all in host
 * RAM, or in between (a move that did not finish).
 */
export const MEMORY_RESIDENCIES = ['resident', 'suspended', 'partial'] as const;
export const memoryResidencySchema = z.enum(MEMORY_RESIDENCIES);
export type MemoryResidency = z.infer<typeof memoryResidencySchema>;

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

export const gpuLimitsSchema = z
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
 * with that spec and their GPU memory on the GPU; shards in `suspendedShardIds` must keep
 * running with their GPU memory in host RAM (never launched afresh); shards in
 * `stoppedShardIds` must stay stopped (containers kept); shards in `keptShardIds` are left as
 * they are; any other labelled container is stopped and removed.
 */
export const desiredStateFields = {
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
  /**
   * Shards whose container runs with its GPU memory in host RAM (SUSPENDING, SUSPENDED):
   * suspended if they are not, never launched. Sent only to an agent whose host registered as
   * able to suspend (`HostInfo.suspendBudgetBytes` > 0): no other host has such shards.
   */
  suspendedShardIds: z.array(shardIdSchema).max(MAX_SHARDS_PER_HOST).optional(),
};

/** In a register or reconcile request: the agent honours a reply's `keptShardIds`. */
export const acceptsKeptShards = z.boolean().optional();
