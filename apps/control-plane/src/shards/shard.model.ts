/**
 * The shard as the API shows it: its GraphQL object type and how a row becomes one
 * (`shardView`), its reservations per GPU and the arguments that list shards. The enums these
 * and the input and event types share are registered in shard-enums.ts. What callers send is in
 * shard-input.model.ts, the state-change events in shard-event.model.ts, placementPreview's
 * answer in placement-preview.model.ts.
 */
import { ArgsType, Field, Float, ID, Int, ObjectType } from '@nestjs/graphql';
import { Label, labelsOf } from '../fleet/label.model.js';
import { Connection, ConnectionArgs } from '../graphql/connection.js';
import { Size, sizeOf } from '../graphql/size.model.js';
import { ComputeMode, PlacementPolicy, ShardState } from './shard-enums.js';
import { stringRecord, type ShardRecord } from './shard-record.js';

@ObjectType()
export class EnvVar {
  @Field()
  name!: string;

  @Field()
  value!: string;
}

/** What a VIEWER token reads instead of an environment value. */
export const MASKED_ENV_VALUE = '********';

@ObjectType({ description: "Where a shard's GPU memory is (docs/elastic.md)." })
export class ShardMemory {
  @Field(() => String, {
    description:
      'GPU: all of it on its GPUs; MOVING_OUT (SUSPENDING), HOST (SUSPENDED: in its host RAM, no GPU held), MOVING_IN (RESUMING).',
  })
  where!: 'GPU' | 'MOVING_OUT' | 'HOST' | 'MOVING_IN';

  @Field(() => String, {
    nullable: true,
    description:
      'Who suspended it: suspend-requested (its owner), idle-suspend (the idle policy), make-room (the queue), reclaim. Null while on the GPU.',
  })
  suspendCause!: string | null;

  @Field(() => Date, {
    nullable: true,
    description:
      'SUSPENDED: when its resume was asked for (a wake from one of its processes, its owner, room back after a reclaim); it resumes when its own GPUs have room. Null: it stays suspended.',
  })
  resumeWantedAt!: Date | null;

  @Field(() => Size, {
    nullable: true,
    description: 'The move under way: bytes moved so far; the last move: its bytes.',
  })
  moved!: Size | null;

  @Field(() => Size, { nullable: true, description: 'The move under way: bytes to move.' })
  total!: Size | null;

  @Field(() => Float, { nullable: true, description: 'Seconds the last finished move took.' })
  lastMoveSeconds!: number | null;

  @Field(() => String, {
    nullable: true,
    description: 'Why the last suspend or resume failed, as its host said.',
  })
  lastError!: string | null;
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

  @Field({
    description:
      "Elastic (docs/elastic.md): its GPU memory may be suspended to its host's RAM by the queue while idle, to make room, and by a reclaim instead of a stop; resumed on demand. Its team's quota says whether it may be (allowElastic).",
  })
  elastic!: boolean;

  @Field(() => ShardMemory, {
    description:
      'Where its GPU memory is and the move under way or last done (SUSPENDING, SUSPENDED and RESUMING: host RAM is involved).',
  })
  memory!: ShardMemory;
}

function memoryOf(record: ShardRecord): ShardMemory {
  const where =
    record.state === 'SUSPENDING'
      ? 'MOVING_OUT'
      : record.state === 'SUSPENDED'
        ? 'HOST'
        : record.state === 'RESUMING'
          ? 'MOVING_IN'
          : 'GPU';
  return {
    where,
    suspendCause: where === 'GPU' ? null : record.suspendCause,
    resumeWantedAt: record.state === 'SUSPENDED' ? record.resumeWantedAt : null,
    moved: record.memoryMovedBytes === null ? null : sizeOf(record.memoryMovedBytes),
    total: record.memoryTotalBytes === null ? null : sizeOf(record.memoryTotalBytes),
    lastMoveSeconds: record.memoryMoveSeconds,
    lastError: record.memoryMoveError,
  };
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
    elastic: record.elastic,
    memory: memoryOf(record),
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
