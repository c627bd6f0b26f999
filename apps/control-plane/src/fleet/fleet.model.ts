import { ArgsType, Field, Float, ID, Int, ObjectType, registerEnumType } from '@nestjs/graphql';
import { bytes, freeBytes, promiseBytes, type GpuCapacity } from '@gpushards/limits';
import { HostState, type Gpu as GpuRow, type Host as HostRow } from '../database/index.js';
import { Connection, ConnectionArgs } from '../graphql/connection.js';
import { Size, sizeOf } from '../graphql/size.model.js';
import { stringRecord } from '../shards/shard-record.js';
import { Label, labelsOf } from './label.model.js';

registerEnumType(HostState, {
  name: 'HostState',
  valuesMap: {
    ONLINE: { description: 'Heartbeating; takes new shards.' },
    OFFLINE: {
      description:
        'Missed heartbeats for GPUSHARDS_HOST_OFFLINE_SECONDS; its shards are LOST and released.',
    },
    CORDONED: { description: 'Heartbeating; keeps its shards, takes no new ones.' },
    DRAINING: { description: 'Cordoned, and every shard on it was asked to stop.' },
  },
});

@ObjectType({ description: 'One physical GPU.' })
export class Gpu {
  @Field(() => ID, { description: 'NVML UUID.' })
  uuid!: string;

  @Field(() => ID)
  hostId!: string;

  @Field(() => Int, { description: 'NVML index on its host at the last registration.' })
  index!: number;

  @Field()
  model!: string;

  @Field(() => Size, { description: 'Physical memory.' })
  total!: Size;

  @Field(() => Size, { description: 'What may be reserved: floor(total × overcommitRatio).' })
  capacity!: Size;

  @Field(() => Size, {
    description: 'Held by live shards (their caps: request + context overhead).',
  })
  reserved!: Size;

  @Field(() => Size, {
    description:
      "What placement may still give here: the smaller of total − unattributed − reserved (what is physically there) and capacity − reserved − suspended (the caps' promise); 0 for a missing GPU.",
  })
  free!: Size;

  @Field(() => Size, {
    description:
      'Caps of elastic shards suspended from this GPU to host RAM (docs/elastic.md): off the GPU, still promised within capacity, so a resume finds room.',
  })
  suspended!: Size;

  @Field(() => Size, { description: 'In use on the device at the last heartbeat (all processes).' })
  used!: Size;

  @Field(() => Size, {
    description:
      "Held at the last heartbeat by processes of no shard that are not on the host's allow-list (NVML per process; 0 where the host cannot sample processes).",
  })
  unattributed!: Size;

  @Field(() => Float)
  overcommitRatio!: number;

  @Field(() => Float, {
    description:
      'The compute shares its live shards are guaranteed, percent (placement keeps it at most 100; docs/compute.md).',
  })
  computeGuaranteedPercent!: number;

  @Field(() => Float, {
    description:
      "The part of it, percent, that its host's MPS partition keeps for ISOLATED shards (the host's computeIsolatedPoolPercent); 0: none. Shards of other modes share the rest.",
  })
  computeIsolatedPoolPercent!: number;

  @Field(() => Float, {
    description:
      'Of computeGuaranteedPercent, the shares of its live ISOLATED shards, percent (placement keeps it within computeIsolatedPoolPercent).',
  })
  computeIsolatedPercent!: number;

  @Field(() => Date, {
    nullable: true,
    description: "Since when the host's registrations no longer list it; it takes no shards.",
  })
  missingSince!: Date | null;
}

@ObjectType({ description: "A host's GPUs together (missing GPUs left out)." })
export class HostMemory {
  @Field(() => Size)
  total!: Size;

  @Field(() => Size)
  capacity!: Size;

  @Field(() => Size)
  reserved!: Size;

  @Field(() => Size)
  free!: Size;

  @Field(() => Size, {
    description:
      "Held by processes of no shard that are not on the host's allow-list, over its GPUs (Gpu.unattributed).",
  })
  unattributed!: Size;

  @Field(() => Size, { description: 'Caps suspended from its GPUs to host RAM (Gpu.suspended).' })
  suspended!: Size;

  @Field(() => Size, {
    description:
      'Host RAM its agent lets suspended elastic shards take (GPUSHARDS_SUSPEND_BUDGET, as last registered); 0: the host does not suspend (suspendUnavailableReason says why).',
  })
  suspendBudget!: Size;

  @Field(() => String, {
    nullable: true,
    description:
      "Why the host does not suspend elastic shards (its agent's words: no checkpoint API in the driver, a budget of 0), null when it does.",
  })
  suspendUnavailableReason!: string | null;
}

@ObjectType({ description: 'A GPU box run by an agent.' })
export class Host {
  @Field(() => ID, { description: "The agent's stable host id." })
  id!: string;

  @Field()
  name!: string;

  @Field(() => HostState)
  state!: HostState;

  @Field({
    description: 'Cordoned by an operator (kept while OFFLINE, so it comes back cordoned).',
  })
  cordoned!: boolean;

  @Field(() => [Label])
  labels!: Label[];

  @Field(() => Size, {
    description: 'Memory one CUDA context takes here; added to each shard’s cap.',
  })
  contextOverhead!: Size;

  @Field(() => String, { nullable: true })
  agentVersion!: string | null;

  @Field(() => String, { nullable: true })
  driverVersion!: string | null;

  @Field(() => String, { nullable: true })
  cudaVersion!: string | null;

  @Field({ description: 'Its GPUs are simulated (fake driver libraries).' })
  simulated!: boolean;

  @Field(() => Float, {
    description:
      'The MPS partition its agent runs for ISOLATED shards: the part of every GPU, percent, kept for them (as last registered); 0: none, the host takes no ISOLATED shard.',
  })
  computeIsolatedPoolPercent!: number;

  @Field(() => Date, { nullable: true })
  lastHeartbeatAt!: Date | null;

  @Field()
  registeredAt!: Date;

  @Field(() => [Gpu], { description: 'By index.' })
  gpus!: Gpu[];

  @Field(() => HostMemory)
  memory!: HostMemory;
}

@ObjectType()
export class HostConnection extends Connection(Host) {}

@ObjectType()
export class GpuConnection extends Connection(Gpu) {}

@ArgsType()
export class HostsArgs extends ConnectionArgs {
  @Field(() => [HostState], { nullable: true, description: 'Any of these states.' })
  states?: HostState[] | null;
}

@ArgsType()
export class GpusArgs extends ConnectionArgs {
  @Field(() => ID, { nullable: true })
  hostId?: string | null;

  @Field(() => String, {
    nullable: true,
    description: 'Case-insensitive part of the model name ("H100").',
  })
  model?: string | null;
}

/** The row as libs/limits' capacity rule reads a GPU. */
function capacityOfRow(gpu: GpuRow): GpuCapacity {
  return {
    totalBytes: bytes(Number(gpu.totalBytes)),
    reservedBytes: bytes(Number(gpu.reservedBytes)),
    suspendedBytes: bytes(Number(gpu.suspendedBytes)),
    unownedBytes: bytes(Number(gpu.unattributedBytes)),
    overcommitRatio: gpu.overcommitRatio,
  };
}

/** floor(total × ratio), as PostgreSQL computes it (both IEEE doubles): what its caps may add up to. */
function capacityOf(gpu: GpuRow): number {
  return promiseBytes(capacityOfRow(gpu));
}

export function gpuView(gpu: GpuRow): Gpu {
  const capacity = capacityOf(gpu);
  const free = gpu.missingSince === null ? freeBytes(capacityOfRow(gpu)) : 0;
  return {
    uuid: gpu.uuid,
    hostId: gpu.hostId,
    index: gpu.index,
    model: gpu.model,
    total: sizeOf(gpu.totalBytes),
    capacity: sizeOf(capacity),
    reserved: sizeOf(gpu.reservedBytes),
    free: sizeOf(free),
    used: sizeOf(gpu.usedBytes),
    unattributed: sizeOf(gpu.unattributedBytes),
    suspended: sizeOf(gpu.suspendedBytes),
    overcommitRatio: gpu.overcommitRatio,
    computeGuaranteedPercent: gpu.guaranteedComputePermille / 10,
    computeIsolatedPoolPercent: gpu.isolatedPoolPermille / 10,
    computeIsolatedPercent: gpu.isolatedComputePermille / 10,
    missingSince: gpu.missingSince,
  };
}

export function hostView(host: HostRow & { gpus: GpuRow[] }): Host {
  const gpus = [...host.gpus].sort((a, b) => a.index - b.index).map(gpuView);
  const present = host.gpus.filter((gpu) => gpu.missingSince === null);
  const sum = (values: number[]) => values.reduce((total, value) => total + value, 0);
  const total = sum(present.map((gpu) => Number(gpu.totalBytes)));
  const capacity = sum(present.map(capacityOf));
  const reserved = sum(present.map((gpu) => Number(gpu.reservedBytes)));
  return {
    id: host.id,
    name: host.name,
    state: host.state,
    cordoned: host.cordoned,
    labels: labelsOf(stringRecord(host.labels)),
    contextOverhead: sizeOf(host.contextOverheadBytes),
    agentVersion: host.agentVersion,
    driverVersion: host.driverVersion,
    cudaVersion: host.cudaVersion,
    simulated: host.simulated,
    computeIsolatedPoolPercent: Math.max(0, ...present.map((gpu) => gpu.isolatedPoolPermille)) / 10,
    lastHeartbeatAt: host.lastHeartbeatAt,
    registeredAt: host.registeredAt,
    gpus,
    memory: {
      total: sizeOf(total),
      capacity: sizeOf(capacity),
      reserved: sizeOf(reserved),
      free: sizeOf(sum(gpus.map((gpu) => gpu.free.bytes))),
      unattributed: sizeOf(sum(gpus.map((gpu) => gpu.unattributed.bytes))),
      suspended: sizeOf(sum(gpus.map((gpu) => gpu.suspended.bytes))),
      suspendBudget: sizeOf(host.suspendBudgetBytes),
      suspendUnavailableReason: host.suspendUnavailableReason,
    },
  };
}
