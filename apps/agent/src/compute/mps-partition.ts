/**
 * The host's MPS partition (docs/agent.md, "MPS partition"; docs/compute.md): the host's
 * operator runs NVIDIA's MPS control daemon and keeps P percent of every GPU's SMs for isolated
 * shards; every shard of the host is an MPS client, an isolated one at its own share, every
 * other one at 100 − P (and takes libvgpu.so's turns there).
 */
import { statSync } from 'node:fs';
import { join } from 'node:path';

import type { ComputeShareSpec } from '@gpushards/protocol';

/** What the agent is told about the host's partition. */
export interface MpsPartition {
  /** The MPS control daemon's pipe folder on the host (its CUDA_MPS_PIPE_DIRECTORY). */
  readonly pipeDir: string;
  /** P: the whole percent of every GPU kept for isolated shards, 1..90. */
  readonly isolatedPercent: number;
}

/**
 * What an MPS server holds on each GPU, which no shard's processes are charged: on an H100
 * (driver 580) 66 MiB listed under the server's pid and 8 MiB more on the card, 74 MiB in all
 * once its first client connects (native/gpu-tests/RESULTS.md, 2026-11-27 20:57). Left out of
 * the capacity a host with a partition registers, rounded up for other drivers.
 */
export const MPS_SERVER_BYTES = 128 * 1024 * 1024;

export const MPS_ISOLATED_PERCENT_MIN = 1;
export const MPS_ISOLATED_PERCENT_MAX = 90;

/** Why `percent` cannot be P, or undefined. */
export function isolatedPercentProblem(percent: number): string | undefined {
  if (
    Number.isInteger(percent) &&
    percent >= MPS_ISOLATED_PERCENT_MIN &&
    percent <= MPS_ISOLATED_PERCENT_MAX
  ) {
    return undefined;
  }
  return `must be a whole percent from ${MPS_ISOLATED_PERCENT_MIN} to ${MPS_ISOLATED_PERCENT_MAX}, got ${percent}`;
}

/**
 * Why the MPS control daemon does not seem to run with this pipe folder, or undefined: the
 * folder must exist and hold the daemon's `control` socket (the daemon makes it at start and
 * removes it when it quits).
 */
export function mpsPipeDirProblem(pipeDir: string): string | undefined {
  const start = `start it with CUDA_MPS_PIPE_DIRECTORY=${pipeDir} nvidia-cuda-mps-control -d (docs/agent.md, "MPS partition")`;
  let folder;
  try {
    folder = statSync(pipeDir);
  } catch {
    return `${pipeDir} does not exist: the MPS control daemon does not seem to run there; ${start}`;
  }
  if (!folder.isDirectory()) return `${pipeDir} is not a folder`;
  const control = join(pipeDir, 'control');
  let entry;
  try {
    entry = statSync(control);
  } catch {
    return `${pipeDir} holds no "control" socket: the MPS control daemon does not seem to run there; ${start}`;
  }
  if (!entry.isSocket()) {
    return `${control} is not a socket: the MPS control daemon does not seem to run there; ${start}`;
  }
  return undefined;
}

/** Checks a partition given in code (createAgent); throws with what is wrong. */
export function checkMpsPartition(partition: MpsPartition): MpsPartition {
  const percent = isolatedPercentProblem(partition.isolatedPercent);
  if (percent !== undefined) throw new RangeError(`mps.isolatedPercent ${percent}`);
  const folder = mpsPipeDirProblem(partition.pipeDir);
  if (folder !== undefined) throw new Error(`mps.pipeDir: ${folder}`);
  return partition;
}

/** The host's partition as the register request tells it: permille of every GPU. */
export function isolatedComputePermille(partition: MpsPartition): number {
  return partition.isolatedPercent * 10;
}

/**
 * The MPS active-thread percentage of a shard on a host with a partition: an isolated shard's
 * share in whole percent (rounded down, at least 1), every other shard 100 − P.
 */
export function mpsThreadPercent(partition: MpsPartition, compute?: ComputeShareSpec): number {
  if (compute?.mode !== 'isolated') return 100 - partition.isolatedPercent;
  return Math.max(1, Math.floor(compute.sharePermille / 10));
}

/**
 * Why this host cannot launch the shard as its spec asks, or undefined: an isolated shard
 * needs the host's partition and must fit in it. Never run it as another kind of shard.
 */
export function isolatedLaunchProblem(
  hostId: string,
  partition: MpsPartition | undefined,
  compute?: ComputeShareSpec,
): string | undefined {
  if (compute?.mode !== 'isolated') return undefined;
  if (partition === undefined) {
    return `an isolated shard needs an MPS partition, and host ${hostId} runs none (GPUSHARDS_MPS_PIPE_DIR and GPUSHARDS_MPS_ISOLATED_PERCENT, docs/agent.md)`;
  }
  const percent = mpsThreadPercent(partition, compute);
  if (percent > partition.isolatedPercent) {
    return `an isolated shard of ${percent}% does not fit host ${hostId}'s MPS partition of ${partition.isolatedPercent}%`;
  }
  return undefined;
}
