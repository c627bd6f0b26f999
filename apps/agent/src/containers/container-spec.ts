import type { ContainerCreateOptions } from 'dockerode';

import { FAKE_STATE_IN_CONTAINER } from '../gpus/fake-driver.js';
import { containerName, LABELS } from './labels.js';

/** Where things appear inside a shard's container. */
export const CONTAINER_PATHS = {
  interposer: '/usr/lib/gpushards/libvgpu.so',
  preload: '/etc/ld.so.preload',
  regionDir: '/run/gpushards',
  /** The host's compute ledger folder, read-write (docs/compute.md); only when the host has one. */
  ledgerDir: '/run/gpushards/ledger',
  /**
   * The MPS control daemon's pipe folder, read-only, on a host with an MPS partition: clients
   * connect to its sockets (a read-only mount allows that) but cannot plant or replace any.
   * libvgpu.so points CUDA_MPS_PIPE_DIRECTORY here whatever the shard's environment says.
   */
  mpsPipeDir: '/run/gpushards/mps',
  regionFile: '/run/gpushards/region',
  /** The agent's limits file, read-only: the caps libvgpu.so enforces (docs/interposer.md). */
  limits: '/etc/gpushards/limits',
  /** Where the fake driver libraries go in simulated mode (Debian/Ubuntu multiarch path). */
  driverDir: '/usr/lib/x86_64-linux-gnu',
  /** The fakes' shared state file in simulated mode (GPUSHARDS_FAKE_STATE). */
  fakeState: FAKE_STATE_IN_CONTAINER,
} as const;

/** A GPU of the shard with the cap the control plane computed and its host NVML index. */
export interface ShardGpu {
  readonly uuid: string;
  readonly limitBytes: number;
  readonly hostIndex: number;
}

/** Fake driver libraries and their configuration, mounted into shards in simulated mode. */
export interface SimulatedDriver {
  readonly cudaLibrary: string;
  readonly nvmlLibrary: string;
  /** The fakes' shared state file on the host (the simulated GPUs' memory). */
  readonly stateFile: string;
  /** The variables the fakes read inside a shard (GPUs, state file), passed to every shard. */
  readonly env: Readonly<Record<string, string>>;
}

export interface ContainerPlan {
  readonly hostId: string;
  readonly shardId: string;
  readonly teamId: string;
  readonly image: string;
  readonly command?: readonly string[];
  /** The user's environment with reserved keys already stripped. */
  readonly env: Readonly<Record<string, string>>;
  readonly gpus: readonly ShardGpu[];
  readonly interposerPath: string;
  readonly preloadFile: string;
  /** The shard's region folder on the host. */
  readonly regionDir: string;
  /** The shard's limits file on the host (root's, 0644), mounted read-only. */
  readonly limitsFile: string;
  /** The host's compute ledger folder; absent = compute not governed. */
  readonly ledgerDir?: string;
  /** On a host with an MPS partition: the daemon's pipe folder and this shard's percentage. */
  readonly mps?: { readonly pipeDir: string; readonly threadPercent: number };
  /** "uid[:gid]" the container runs as instead of the image's user. */
  readonly user?: string;
  /** Most processes and threads in the container. */
  readonly pidsLimit: number;
  /** Per-context charge the interposer uses, when measured. */
  readonly contextBytes?: number;
  /** Simulated GPUs: no NVIDIA runtime request (nothing could serve it). */
  readonly simulated: boolean;
  /** In simulated mode, the fake libraries mounted where the driver would be, if any. */
  readonly simulatedDriver?: SimulatedDriver;
}

/**
 * The only capabilities a shard keeps (Docker's default set less what could reach the host:
 * no SYS_ADMIN, so no mount or remount of the limits file; no MKNOD, NET_RAW, SYS_CHROOT,
 * SETFCAP, SETPCAP, AUDIT_WRITE). What is left lets an image that runs as root own and
 * change its own files and drop to another user, as ordinary images do.
 */
export const SHARD_CAPABILITIES = [
  'CHOWN',
  'DAC_OVERRIDE',
  'FOWNER',
  'FSETID',
  'SETUID',
  'SETGID',
  'KILL',
  'NET_BIND_SERVICE',
] as const;

/**
 * Orders a shard's GPUs as CUDA enumerates them inside the container (host index = PCI bus
 * order, with CUDA_DEVICE_ORDER=PCI_BUS_ID), which is the <i> of CUDA_DEVICE_MEMORY_LIMIT_<i>.
 */
export function orderGpus(gpus: readonly ShardGpu[]): ShardGpu[] {
  return [...gpus].sort((a, b) => a.hostIndex - b.hostIndex);
}

/** The Docker create request for one shard. Pure: everything it needs is in the plan. */
export function buildCreateOptions(plan: ContainerPlan): ContainerCreateOptions {
  const gpus = orderGpus(plan.gpus);
  const uuids = gpus.map((gpu) => gpu.uuid);
  const env: Record<string, string> = {
    // A user may pick another order; the interposer maps limits by UUID either way.
    CUDA_DEVICE_ORDER: 'PCI_BUS_ID',
    ...plan.env,
    ...(plan.simulatedDriver?.env ?? {}),
    NVIDIA_VISIBLE_DEVICES: uuids.join(','),
    // No NVIDIA runtime hides the other GPUs of a simulated host: the fake driver does. On a
    // real one, the runtime mounts libcuda only for the "compute" capability, which many images
    // do not ask for (the runtime's default is "utility"); users may not set NVIDIA_* keys.
    ...(plan.simulated
      ? { CUDA_VISIBLE_DEVICES: uuids.join(',') }
      : { NVIDIA_DRIVER_CAPABILITIES: 'compute,utility' }),
    GPUSHARDS_REGION_PATH: CONTAINER_PATHS.regionFile,
    // The ledger member: every process of the shard shares one entry, and the agent reads
    // the shard's activity under this name.
    ...(plan.ledgerDir !== undefined
      ? { GPUSHARDS_LEDGER_DIR: CONTAINER_PATHS.ledgerDir, GPUSHARDS_SHARD_ID: plan.shardId }
      : {}),
    ...(plan.contextBytes !== undefined
      ? { GPUSHARDS_CONTEXT_BYTES: String(plan.contextBytes) }
      : {}),
    // An MPS client of the host's daemon at the shard's percentage (libvgpu.so forces both
    // from the limits file at cuInit too; users may not set CUDA_MPS_* keys).
    ...(plan.mps !== undefined
      ? {
          CUDA_MPS_PIPE_DIRECTORY: CONTAINER_PATHS.mpsPipeDir,
          CUDA_MPS_ACTIVE_THREAD_PERCENTAGE: String(plan.mps.threadPercent),
        }
      : {}),
  };
  gpus.forEach((gpu, ordinal) => {
    env[`CUDA_DEVICE_MEMORY_LIMIT_${ordinal}`] = String(gpu.limitBytes);
  });
  const binds = [
    `${plan.interposerPath}:${CONTAINER_PATHS.interposer}:ro`,
    `${plan.preloadFile}:${CONTAINER_PATHS.preload}:ro`,
    `${plan.regionDir}:${CONTAINER_PATHS.regionDir}:rw`,
    `${plan.limitsFile}:${CONTAINER_PATHS.limits}:ro`,
  ];
  if (plan.ledgerDir !== undefined) binds.push(`${plan.ledgerDir}:${CONTAINER_PATHS.ledgerDir}:rw`);
  if (plan.mps !== undefined) binds.push(`${plan.mps.pipeDir}:${CONTAINER_PATHS.mpsPipeDir}:ro`);
  if (plan.simulatedDriver) {
    binds.push(
      `${plan.simulatedDriver.cudaLibrary}:${CONTAINER_PATHS.driverDir}/libcuda.so.1:ro`,
      `${plan.simulatedDriver.nvmlLibrary}:${CONTAINER_PATHS.driverDir}/libnvidia-ml.so.1:ro`,
      `${plan.simulatedDriver.stateFile}:${CONTAINER_PATHS.fakeState}:rw`,
    );
  }
  return {
    name: containerName(plan.hostId, plan.shardId),
    Image: plan.image,
    ...(plan.command ? { Cmd: [...plan.command] } : {}),
    ...(plan.user !== undefined ? { User: plan.user } : {}),
    Env: Object.entries(env).map(([key, value]) => `${key}=${value}`),
    Labels: {
      [LABELS.managed]: 'true',
      [LABELS.shard]: plan.shardId,
      [LABELS.team]: plan.teamId,
      [LABELS.host]: plan.hostId,
      [LABELS.gpus]: uuids.join(','),
    },
    HostConfig: {
      Binds: binds,
      Privileged: false,
      SecurityOpt: ['no-new-privileges'],
      CapDrop: ['ALL'],
      CapAdd: [...SHARD_CAPABILITIES],
      PidsLimit: plan.pidsLimit,
      // No Memory limit: a suspended (elastic) shard keeps its GPU memory in its processes' host
      // memory, which a container limit would let the kernel OOM-kill; the host's suspend budget
      // bounds it instead (docs/agent.md, "Elastic memory").
      RestartPolicy: { Name: 'no' },
      ...(plan.simulated
        ? {}
        : {
            DeviceRequests: [{ Driver: '', Count: 0, DeviceIDs: uuids, Capabilities: [['gpu']] }],
          }),
    },
  };
}

/**
 * Docker pulls every tag of a repository when none is named; name `latest` the way the
 * docker command does.
 */
export function pullReference(image: string): string {
  if (image.includes('@')) return image;
  const lastSlash = image.lastIndexOf('/');
  return image.slice(lastSlash + 1).includes(':') ? image : `${image}:latest`;
}
