import {
  ArgsType,
  Field,
  Float,
  ID,
  InputType,
  Int,
  ObjectType,
  registerEnumType,
} from '@nestjs/graphql';
import { ComputeMode, ShardState, PlacementPolicy } from '../database/index.js';
import { IdleNotice } from '../compute/idle.model.js';
import { CapViolation } from '../fence/cap-policy.model.js';
import { UngovernedCompute } from '../fence/ungoverned-compute.model.js';
import { Label, LabelInput, labelsOf } from '../fleet/label.model.js';
import { Connection, ConnectionArgs } from '../graphql/connection.js';
import { Size, sizeOf } from '../graphql/size.model.js';
import { stringRecord, type ShardRecord } from './shard-record.js';

registerEnumType(ShardState, {
  name: 'ShardState',
  description: 'Where a shard is in its life; see docs/api.md for the transitions.',
  valuesMap: {
    PENDING: {
      description: 'Waits in the queue for capacity; holds no GPUs, counts against quota.',
    },
    PLACED: { description: 'GPUs reserved; the agent has not reported it starting yet.' },
    STARTING: { description: 'The agent is pulling the image or starting the container.' },
    RUNNING: { description: 'The container runs.' },
    STOPPING: {
      description: 'Asked to stop; still holds its reservation until the agent reports.',
    },
    STOPPED: { description: 'Stopped on request; reservation released, container kept.' },
    EXITED: { description: 'Its process ended on its own (exitCode); reservation released.' },
    FAILED: { description: 'Could not launch or keep running (failureReason); released.' },
    LOST: {
      description:
        'Its host went OFFLINE; reservation released. Counts against quota until deleted or back.',
    },
    PREEMPTED: {
      description: 'Stopped to give its capacity to a shard with a better claim; not requeued.',
    },
    EXPIRED: { description: 'Waited in the queue past its maximum wait; never ran.' },
    DELETED: { description: 'Deleted; kept for the record.' },
  },
});

registerEnumType(ComputeMode, {
  name: 'ComputeMode',
  description: "How a shard's compute share holds (docs/compute.md).",
  valuesMap: {
    GUARANTEED: {
      description:
        'At least its share of each GPU while the GPU is contended, and any time nobody else wants (work-conserving). The default.',
    },
    CAPPED: { description: 'Never more than its share, even alone (predictable cost or latency).' },
    ISOLATED: {
      description:
        "Its share of the GPU's SMs in an MPS partition of its own, on a host that runs one (Host.computeIsolatedPoolPercent > 0): never more than its share, and its latency held whatever its neighbours do (they run outside the partition). Needs computeSharePercent; the share is fixed while the shard holds its GPUs (stop it and start it with another).",
    },
  },
});

registerEnumType(PlacementPolicy, {
  name: 'PlacementPolicy',
  valuesMap: {
    BINPACK: { description: 'Fill the fullest GPUs that fit (keeps whole GPUs free).' },
    SPREAD: { description: 'Use the emptiest GPUs (spreads load and blast radius).' },
  },
});

@ObjectType()
export class EnvVar {
  @Field()
  name!: string;

  @Field()
  value!: string;
}

/** What a VIEWER token reads instead of an environment value. */
export const MASKED_ENV_VALUE = '********';

@InputType()
export class EnvVarInput {
  @Field()
  name!: string;

  @Field()
  value!: string;
}

@ObjectType({ description: 'A container with a hard-capped slice of memory on GPUs of one host.' })
export class Shard {
  @Field(() => ID)
  id!: string;

  @Field(() => ID)
  teamId!: string;

  @Field()
  name!: string;

  @Field({ description: 'Container image reference.' })
  image!: string;

  @Field(() => [String], { description: "Arguments; empty = the image's default command." })
  command!: string[];

  /** Resolved by ShardsResolver.env: VIEWER tokens get the values masked. */
  env!: EnvVar[];

  @Field(() => [EnvVar], {
    description: `Its secret environment: names only, every value "${MASKED_ENV_VALUE}" for every caller.`,
  })
  secretEnv!: EnvVar[];

  @Field(() => Size, { description: 'What was asked for on each GPU.' })
  memoryPerGpu!: Size;

  @Field(() => Size, {
    description:
      "The cap enforced on each GPU and what each GPU reserves: memoryPerGpu plus the host's CUDA context overhead.",
  })
  limitPerGpu!: Size;

  @Field(() => Int)
  gpuCount!: number;

  @Field(() => Size, { description: 'memoryPerGpu × gpuCount: what counts against the quota.' })
  totalMemory!: Size;

  @Field(() => [String])
  gpuModelInclude!: string[];

  @Field(() => [String])
  gpuModelExclude!: string[];

  @Field(() => [Label])
  hostSelector!: Label[];

  @Field(() => PlacementPolicy)
  placementPolicy!: PlacementPolicy;

  @Field(() => ShardState)
  state!: ShardState;

  @Field(() => ID, { nullable: true, description: 'Null only once its host record was deleted.' })
  hostId!: string | null;

  @Field(() => String, { nullable: true })
  failureReason!: string | null;

  @Field(() => Int, { nullable: true })
  exitCode!: number | null;

  @Field(() => String, { nullable: true })
  idempotencyKey!: string | null;

  @Field(() => String, { nullable: true })
  containerId!: string | null;

  @Field()
  createdAt!: Date;

  @Field()
  updatedAt!: Date;

  @Field(() => Date, { nullable: true })
  startedAt!: Date | null;

  @Field(() => Date, { nullable: true })
  stoppedAt!: Date | null;

  @Field(() => Int, { description: 'Bumped by every state change.' })
  version!: number;

  @Field({ description: 'Priority class (inference > build > training).' })
  priorityClass!: string;

  @Field(() => Date, { nullable: true, description: 'When it last started waiting in the queue.' })
  queuedAt!: Date | null;

  @Field(() => Date, { nullable: true, description: 'When it expires if still PENDING.' })
  expiresAt!: Date | null;

  @Field({ description: 'Whether a reclaim puts it back in the queue (else PREEMPTED).' })
  requeue!: boolean;

  @Field(() => Int, {
    nullable: true,
    description:
      'Its compute share of each of its GPUs, percent; null: none asked (it gets an equal split of what the shares on the GPU leave, at least 5%).',
  })
  computeSharePercent!: number | null;

  @Field(() => ComputeMode)
  computeMode!: ComputeMode;

  @Field(() => Date, {
    nullable: true,
    description:
      "Set while its team's idle policy reports it idle: since when it has launched no kernel on any GPU (its start, if it never did). Null otherwise.",
  })
  idleSince!: Date | null;
}

export function shardView(record: ShardRecord): Shard {
  const env = stringRecord(record.env);
  return {
    id: record.id,
    teamId: record.teamId,
    name: record.name,
    image: record.image,
    command: record.command,
    env: Object.entries(env).map(([name, value]) => ({ name, value })),
    // The sealed values never leave the row: names only.
    secretEnv: Object.keys(stringRecord(record.secretEnv)).map((name) => ({
      name,
      value: MASKED_ENV_VALUE,
    })),
    memoryPerGpu: sizeOf(record.bytesPerGpu),
    limitPerGpu: sizeOf(record.limitBytesPerGpu),
    gpuCount: record.gpuCount,
    totalMemory: sizeOf(record.bytesPerGpu * BigInt(record.gpuCount)),
    gpuModelInclude: record.gpuModelInclude,
    gpuModelExclude: record.gpuModelExclude,
    hostSelector: labelsOf(stringRecord(record.hostSelector)),
    placementPolicy: record.placementPolicy,
    state: record.state,
    hostId: record.hostId,
    failureReason: record.failureReason,
    exitCode: record.exitCode,
    idempotencyKey: record.idempotencyKey,
    containerId: record.containerId,
    createdAt: record.createdAt,
    updatedAt: record.updatedAt,
    startedAt: record.startedAt,
    stoppedAt: record.stoppedAt,
    version: record.version,
    priorityClass: record.priorityClass,
    queuedAt: record.queuedAt,
    expiresAt: record.expiresAt,
    requeue: record.requeue,
    computeSharePercent: record.computeSharePermille > 0 ? record.computeSharePermille / 10 : null,
    computeMode: record.computeMode,
    idleSince: record.idleSince,
  };
}

@ObjectType()
export class ShardConnection extends Connection(Shard) {}

@ObjectType({ description: "A shard's reservation on one GPU over one interval." })
export class ShardGpu {
  @Field(() => ID)
  gpuUuid!: string;

  @Field(() => Int, { description: 'The GPU index on its host.' })
  index!: number;

  @Field()
  model!: string;

  @Field(() => Size, { description: 'Equal to the shard’s limitPerGpu while live.' })
  reserved!: Size;

  @Field(() => Size, {
    description:
      'What the shard used on this GPU at the last heartbeat, as libvgpu.so counted it inside the container (charged).',
  })
  used!: Size;

  @Field(() => Size, {
    nullable: true,
    description:
      "What the shard's processes really held on this GPU at the last heartbeat, measured by the host's agent through NVML (out of the tenant's reach); null until reported or where the host cannot sample processes. used and real apart: drift.",
  })
  real!: Size | null;

  @Field(() => Float, {
    nullable: true,
    description:
      "The share of time the shard held this GPU between its host's last two heartbeats (compute ledger, docs/compute.md); null until reported or where the host has no ledger.",
  })
  busyRatio!: number | null;

  @Field(() => Date, {
    nullable: true,
    description:
      'When the shard last launched a kernel on this GPU, as of its host’s last heartbeat (compute ledger); null until reported. Old: the shard holds memory and computes nothing.',
  })
  lastKernelAt!: Date | null;

  @Field()
  reservedAt!: Date;

  @Field(() => Date, { nullable: true, description: 'Null while the reservation is live.' })
  releasedAt!: Date | null;
}

@ObjectType({ description: 'A state change of a shard.' })
export class ShardEvent {
  @Field(() => Shard, { description: 'The shard after the change.' })
  shard!: Shard;

  @Field(() => ShardState, { nullable: true, description: 'Null for a shard just created.' })
  previousState!: ShardState | null;

  @Field(() => ShardState)
  state!: ShardState;

  @Field()
  at!: Date;

  @Field(() => ShardEventKind, {
    description:
      "STATE: the shard changed state. VIOLATION: see `violation`. UNGOVERNED_COMPUTE: it ran GPU work outside the compute ledger; see `ungovernedCompute`. IDLE: its team's idle policy found it idle (the warning); IDLE_STOP: the policy stops it (a STATE event to STOPPING follows); see `idle`.",
  })
  kind!: ShardEventKind;

  @Field(() => CapViolation, {
    nullable: true,
    description:
      "Set for kind VIOLATION: the shard's real GPU memory passed its cap plus the host's tolerance and its cap policy was applied (state and previousState are then its current state).",
  })
  violation!: CapViolation | null;

  @Field(() => UngovernedCompute, {
    nullable: true,
    description:
      'Set for kind UNGOVERNED_COMPUTE: the compute fence found kernels no compute-ledger turn governed (a process that bypassed libvgpu.so) and its cap policy was applied (state and previousState are then its current state).',
  })
  ungovernedCompute!: UngovernedCompute | null;

  @Field(() => IdleNotice, { nullable: true, description: 'Set for kinds IDLE and IDLE_STOP.' })
  idle!: IdleNotice | null;
}

export enum ShardEventKind {
  STATE = 'STATE',
  VIOLATION = 'VIOLATION',
  UNGOVERNED_COMPUTE = 'UNGOVERNED_COMPUTE',
  IDLE = 'IDLE',
  IDLE_STOP = 'IDLE_STOP',
}

registerEnumType(ShardEventKind, { name: 'ShardEventKind' });

@InputType({ description: 'Where a shard may go; shared by createShard and placementPreview.' })
export class PlacementInput {
  @Field({
    description:
      'Memory on each GPU, like "12g" or "1536m" (1024-based). Percentages are refused: GPUs differ in size.',
  })
  memoryPerGpu!: string;

  @Field(() => Int, { nullable: true, description: 'GPUs on one host; default 1.' })
  gpuCount?: number | null;

  @Field(() => [String], {
    nullable: true,
    description:
      'Case-insensitive parts of GPU model names to choose from ("H100"); any when empty.',
  })
  gpuModelInclude?: string[] | null;

  @Field(() => [String], { nullable: true, description: 'Parts of GPU model names to avoid.' })
  gpuModelExclude?: string[] | null;

  @Field(() => [LabelInput], {
    nullable: true,
    description: 'Labels the host must carry with exactly these values.',
  })
  hostSelector?: LabelInput[] | null;

  @Field(() => PlacementPolicy, { nullable: true, description: 'Default BINPACK.' })
  placementPolicy?: PlacementPolicy | null;

  @Field(() => Int, {
    nullable: true,
    description:
      "Compute share of each GPU, whole percent 1-100, within the team's maxComputeSharePercent; placement keeps the shares guaranteed on one GPU at most 100%. Left out: none (an equal split of what the shares leave, at least 5%; guarantees nothing).",
  })
  computeSharePercent?: number | null;

  @Field(() => ComputeMode, {
    nullable: true,
    description:
      'Default GUARANTEED. CAPPED and ISOLATED need computeSharePercent; ISOLATED is placed only on hosts with an isolated partition, within it.',
  })
  computeMode?: ComputeMode | null;

  @Field(() => ID, {
    nullable: true,
    description:
      'The team the shard is for. Admins must name one; others may leave it out (their own team) and may name no other.',
  })
  teamId?: string | null;
}

@InputType()
export class CreateShardInput extends PlacementInput {
  @Field({
    description:
      '1 to 63 of a-z, 0-9, ".", "_" and "-", starting and ending with a letter or digit.',
  })
  name!: string;

  @Field({
    description:
      'Container image reference, like "ghcr.io/org/trainer:1.2" (at most 512 characters).',
  })
  image!: string;

  @Field(() => [String], {
    nullable: true,
    description: "Arguments; left out: the image's default.",
  })
  command?: string[] | null;

  @Field(() => [EnvVarInput], {
    nullable: true,
    description:
      'Environment; keys the agent sets (LD_PRELOAD, CUDA_*, NVIDIA_*, GPUSHARDS_*, ...) are refused.',
  })
  env?: EnvVarInput[] | null;

  @Field(() => [EnvVarInput], {
    nullable: true,
    description:
      'Secret environment: stored encrypted, given to the container, never returned by the API or carried by events (Shard.secretEnv shows the names only). Same rules as env; a name may not be in both.',
  })
  secretEnv?: EnvVarInput[] | null;

  @Field(() => String, {
    nullable: true,
    description:
      "A retried createShard with the team's same key returns the first shard instead of placing another.",
  })
  idempotencyKey?: string | null;

  @Field(() => Boolean, {
    nullable: true,
    description:
      'Default true: a request that fits nowhere now (but could fit the fleet) waits as PENDING. false: NO_CAPACITY at once, as without a queue.',
  })
  queue?: boolean | null;

  @Field(() => String, {
    nullable: true,
    description:
      'Priority class: "inference" (never preempted, only within the team\'s guarantee) > "build" (default) > "training".',
  })
  priorityClass?: string | null;

  @Field(() => Int, {
    nullable: true,
    description: 'Seconds it may wait as PENDING before it ends as EXPIRED; left out: no limit.',
  })
  maxWaitSeconds?: number | null;

  @Field(() => Boolean, {
    nullable: true,
    description:
      'Default true: a shard stopped to give its capacity back waits as PENDING again. false: it ends as PREEMPTED.',
  })
  requeue?: boolean | null;
}

@ObjectType({ description: 'Why one host cannot take a request.' })
export class HostVerdict {
  @Field(() => ID)
  hostId!: string;

  @Field()
  hostName!: string;

  @Field({
    description:
      'host-offline, host-cordoned, host-draining, label-mismatch, model-excluded, no-isolated-partition (an ISOLATED share asked, and the host runs no isolated partition) or not-enough-gpus.',
  })
  kind!: string;

  @Field({ description: 'For people, sizes formatted.' })
  reason!: string;
}

@ObjectType({ description: 'Where a request would go now, or why it cannot go anywhere.' })
export class PlacementPreview {
  @Field({
    description:
      'RUN_NOW: it fits and nothing waits. WAIT: createShard would answer PENDING (it fits nowhere now but could fit the fleet, or shards wait ahead of it; it goes first if it fits without taking room kept for them). NEVER_FITS: refused at once (no host could ever take it).',
  })
  verdict!: string;

  @Field(() => Int, {
    description: 'PENDING shards in the queue now (as of the last admission pass).',
  })
  waitingAhead!: number;

  @Field()
  fits!: boolean;

  @Field(() => ID, { nullable: true })
  hostId!: string | null;

  @Field(() => String, { nullable: true })
  hostName!: string | null;

  @Field(() => [ID], {
    description: 'The GPUs it would take, by index; empty when it does not fit.',
  })
  gpuUuids!: string[];

  @Field(() => Size, {
    nullable: true,
    description:
      "What each of those GPUs would reserve (memoryPerGpu + the host's context overhead).",
  })
  reservedPerGpu!: Size | null;

  @Field({ description: 'A summary for people.' })
  message!: string;

  @Field(() => [HostVerdict], { description: 'When it does not fit: every host, with its reason.' })
  hosts!: HostVerdict[];

  @Field(() => String, {
    nullable: true,
    description:
      "Why the team's quota would refuse it now (createShard checks quota first), if it would.",
  })
  quotaProblem!: string | null;
}

@ArgsType()
export class ShardsArgs extends ConnectionArgs {
  @Field(() => ID, {
    nullable: true,
    description: 'Admins: one team. Others: only their own team anyway.',
  })
  teamId?: string | null;

  @Field(() => [ShardState], { nullable: true, description: 'Any of these states.' })
  states?: ShardState[] | null;

  @Field(() => ID, { nullable: true })
  hostId?: string | null;

  @Field(() => Boolean, {
    nullable: true,
    description: "true: only shards its team's idle policy reports idle (idleSince set).",
  })
  idle?: boolean | null;
}
