/**
 * What the fleet is made of: hosts, their GPUs, and what a shard holds on each GPU.
 */
import { type Bytes, bytes, MiB } from './sizes.js';

export type HostId = string & { readonly __brand: 'HostId' };
export type GpuUuid = string & { readonly __brand: 'GpuUuid' };

function nonEmpty(kind: string, value: string): string {
  if (value.trim() === '') throw new RangeError(`${kind} must not be empty`);
  return value;
}

export function hostId(value: string): HostId {
  return nonEmpty('host id', value) as HostId;
}

/** As NVML reports it ("GPU-…"); the format is not checked, fakes name GPUs as they like. */
export function gpuUuid(value: string): GpuUuid {
  return nonEmpty('GPU UUID', value) as GpuUuid;
}

export const HOST_STATES = ['ONLINE', 'OFFLINE', 'CORDONED', 'DRAINING'] as const;

/**
 * ONLINE takes new shards. OFFLINE has stopped reporting. CORDONED keeps its shards but
 * takes no new ones. DRAINING takes none and is having its shards moved off.
 */
export type HostState = (typeof HOST_STATES)[number];

export interface Gpu {
  readonly uuid: GpuUuid;
  /** NVML index on its host; reported to people and used to break ties. */
  readonly index: number;
  /** As NVML names it, e.g. "NVIDIA H100 80GB HBM3". */
  readonly model: string;
  readonly totalBytes: Bytes;
  /** Sum of reservedBytesPerGpu over the shards placed on this GPU (their memory is on it). */
  readonly reservedBytes: Bytes;
  /**
   * Sum of the caps of the SUSPENDED shards pinned to this GPU (their memory is in their host's
   * RAM; they come back here). Absent: 0.
   */
  readonly suspendedBytes?: Bytes;
  /**
   * Memory held on this GPU by processes of no shard that are not on their host's allow-list,
   * as its agent last measured (NVML): nobody can be promised it. Absent: 0.
   */
  readonly unownedBytes?: Bytes;
  /**
   * The GPU's oversubscription ratio for elastic shards: the caps of its shards, on it and
   * suspended, stay within floor(totalBytes × ratio). Absent takes the fleet default (1: none).
   */
  readonly overcommitRatio?: number;
  /** Sum of the compute shares (permille) of the shards placed on this GPU; absent: 0. */
  readonly guaranteedComputePermille?: number;
  /** Of that sum, the shares of its ISOLATED shards; absent: 0. */
  readonly isolatedComputePermille?: number;
  /**
   * The part of this GPU (permille) its host's MPS partition keeps for ISOLATED shards; absent
   * or 0: none (compute-share.ts computeShareFits).
   */
  readonly isolatedPoolPermille?: number;
}

export interface Host {
  /** Unique across the fleet (the registry's key); placement breaks ties by it. */
  readonly id: HostId;
  readonly name: string;
  readonly state: HostState;
  readonly labels: Readonly<Record<string, string>>;
  /** Per-shard CUDA context overhead measured on this host; absent takes the fleet default. */
  readonly contextOverheadBytes?: Bytes;
  /**
   * Host RAM its agent lets suspended shards' GPU memory take, by their caps (elastic shards);
   * absent or 0: the host does not suspend.
   */
  readonly suspendBudgetBytes?: Bytes;
  /** The caps of its shards in SUSPENDING, SUSPENDED and RESUMING (holdsHostMemory); absent: 0. */
  readonly suspendedBytes?: Bytes;
  readonly gpus: readonly Gpu[];
}

/**
 * A CUDA context costs device memory before the first allocation (a few hundred MiB,
 * depending on driver and GPU). The shard's cap includes it, so a shard can use all the
 * bytes it asked for; the GPU's reservation includes it, so shards never crowd each other.
 */
export const DEFAULT_CONTEXT_OVERHEAD_BYTES = bytes(512 * MiB);

/** 1.0: no GPU's caps, on it and suspended, pass its physical memory unless configured so. */
export const DEFAULT_OVERCOMMIT_RATIO = 1;

/** What one shard holds on each of its GPUs. */
export interface ShardReservation {
  /** What the team asked for, per GPU. */
  readonly bytesPerGpu: Bytes;
  readonly gpuCount: number;
  readonly contextOverheadBytes: Bytes;
}

/** The per-GPU cap the interposer enforces, and what each GPU's reservation grows by. */
export function perGpuCapBytes(reservation: ShardReservation): Bytes {
  return bytes(reservation.bytesPerGpu + reservation.contextOverheadBytes);
}

/** All the device memory the shard holds across its GPUs, overhead included. */
export function shardReservedBytes(reservation: ShardReservation): Bytes {
  return bytes(perGpuCapBytes(reservation) * reservation.gpuCount);
}
