import { promises as fs } from 'node:fs';
import { join } from 'node:path';

import { Inject, Injectable, type OnModuleDestroy } from '@nestjs/common';
import { DEFAULT_CAP_POLICY, type CapPolicy } from '@gpushards/limits';
import type { ComputeShareSpec, GpuLimit } from '@gpushards/protocol';

import { AGENT_CONFIG, type AgentConfig } from '../config/agent-options.js';
import { KeyedMutex } from '../common/keyed-mutex.js';
import { LOGGER, type Logger } from '../logging/logger.js';
import { pressureWaitMs } from '../enforcement/pressure-wait.js';
import { LimitsFile, writeLimitsFile, type LimitsDevice, type MemoryMark } from './limits-file.js';

/** A shard's caps as the agent enforces them. */
export interface ShardLimits {
  readonly shardId: string;
  readonly policy: CapPolicy;
  /** GPU UUID → cap in bytes, context included. */
  readonly capBytes: ReadonlyMap<string, number>;
}

interface Entry {
  policy: CapPolicy;
  capBytes: Map<string, number>;
  file?: LimitsFile;
  /** What real_bytes holds now per GPU, and when real_sampled_at_ms was last written. */
  real: Map<string, number>;
  stampedAt: number;
  /** The compute share its file holds on every GPU; undefined: none written. */
  compute?: ComputeShareSpec;
  /** The MPS percentage its file was written with (fixed while the container runs). */
  mpsThreadPercent?: number;
}

/** real_sampled_at_ms is rewritten at least this often while real_bytes stays the same. */
const STAMP_MS = 1000;

/**
 * Each shard's limits file: the caps and the context charge where only the agent can write
 * (<stateDir>/limits/<shardId>, root's, 0644, bind-mounted read-only into the container at
 * /etc/gpushards/limits), plus the real usage the agent measured, which libvgpu.so budgets
 * against. Written whole before the container starts; changed in place afterwards.
 */
@Injectable()
export class LimitsService implements OnModuleDestroy {
  private readonly entries = new Map<string, Entry>();
  private readonly mutex = new KeyedMutex();
  private readonly logger: Logger;

  constructor(
    @Inject(AGENT_CONFIG) private readonly config: AgentConfig,
    @Inject(LOGGER) logger: Logger,
  ) {
    this.logger = logger.child({ module: 'limits' });
  }

  folder(): string {
    return join(this.config.stateDir, 'limits');
  }

  file(shardId: string): string {
    return join(this.folder(), shardId);
  }

  /**
   * Writes the shard's file from scratch (before its container is created); returns its path.
   * `mpsThreadPercent`: on a host with an MPS partition, the shard's percentage on every GPU.
   */
  prepare(
    shardId: string,
    gpus: readonly GpuLimit[],
    contextBytes: number,
    policy: CapPolicy | undefined,
    compute?: ComputeShareSpec,
    mpsThreadPercent?: number,
  ): Promise<string> {
    return this.mutex.run(shardId, async () => {
      await this.closeFile(shardId);
      const devices: LimitsDevice[] = gpus.map((gpu) => ({
        uuid: gpu.uuid,
        limitBytes: gpu.limitBytes,
        contextBytes,
        // The shard's compute share on every GPU: libvgpu.so reads it at each turn.
        ...(compute === undefined
          ? {}
          : { computeSharePermille: compute.sharePermille, computeMode: compute.mode }),
        ...(mpsThreadPercent === undefined ? {} : { mpsThreadPercent }),
      }));
      await fs.mkdir(this.folder(), { recursive: true, mode: 0o755 });
      // The host's choice of turns, fixed for the life of the container (libvgpu.so reads it once
      // per process).
      await writeLimitsFile(this.file(shardId), devices, {
        shardId,
        computeTurns: this.config.computeTurns,
        pressureWaitMs: this.pressureWaitMs(),
      });
      this.entries.set(shardId, {
        policy: policy ?? DEFAULT_CAP_POLICY,
        capBytes: new Map(gpus.map((gpu) => [gpu.uuid, gpu.limitBytes])),
        real: new Map(),
        stampedAt: 0,
        ...(compute === undefined ? {} : { compute }),
        ...(mpsThreadPercent === undefined ? {} : { mpsThreadPercent }),
      });
      return this.file(shardId);
    });
  }

  /**
   * New caps (resize, reconcile, a shard adopted after a restart): written in place when the
   * file exists, and kept for enforcement either way. A compute share, when given and not what
   * the file holds, is written too (share and mode in one 8-byte write per GPU).
   */
  setLimits(
    shardId: string,
    gpus: readonly GpuLimit[],
    policy: CapPolicy | undefined,
    compute?: ComputeShareSpec,
  ): Promise<void> {
    return this.mutex.run(shardId, async () => {
      const known = this.entries.get(shardId);
      const entry: Entry = known ?? {
        policy: DEFAULT_CAP_POLICY,
        capBytes: new Map(gpus.map((gpu) => [gpu.uuid, gpu.limitBytes])),
        real: new Map<string, number>(),
        stampedAt: 0,
      };
      entry.policy = policy ?? entry.policy;
      // Published with its caps: the fence reads every entry at each sample, and one seen
      // without a GPU's cap while its file opens would be judged against a cap of 0.
      this.entries.set(shardId, entry);
      const file = await this.openFile(shardId, entry);
      if (file !== undefined) await this.writeCompute(shardId, entry, file, gpus, compute);
      if (known === undefined && file !== undefined) {
        for (const gpu of gpus) await file.set(gpu.uuid, 'limit_bytes', gpu.limitBytes);
        return;
      }
      for (const gpu of gpus) {
        if (entry.capBytes.get(gpu.uuid) === gpu.limitBytes && file !== undefined) continue;
        entry.capBytes.set(gpu.uuid, gpu.limitBytes);
        if (file !== undefined && (await file.set(gpu.uuid, 'limit_bytes', gpu.limitBytes))) {
          this.logger.info({ shardId, gpu: gpu.uuid, limitBytes: gpu.limitBytes }, 'limit written');
        }
      }
    });
  }

  /**
   * Writes the compute share into the open file when it is given and differs from what it
   * holds: share and mode only. An MPS client's percentage (mps_thread_percent) stays what the
   * container started with; the control plane refuses such a change, so one that comes anyway
   * is logged.
   */
  private async writeCompute(
    shardId: string,
    entry: Entry,
    file: LimitsFile,
    gpus: readonly GpuLimit[],
    compute: ComputeShareSpec | undefined,
  ): Promise<void> {
    if (compute === undefined) return;
    const same =
      entry.compute?.sharePermille === compute.sharePermille && entry.compute.mode === compute.mode;
    if (same) return;
    if (
      entry.mpsThreadPercent !== undefined &&
      entry.compute !== undefined &&
      (entry.compute.mode === 'isolated' || compute.mode === 'isolated')
    ) {
      this.logger.warn(
        { shardId, from: entry.compute, to: compute, mpsThreadPercent: entry.mpsThreadPercent },
        "an isolated shard's compute changed while it runs: its MPS percentage stays as it started",
      );
    }
    for (const gpu of gpus) await file.setCompute(gpu.uuid, compute.sharePermille, compute.mode);
    entry.compute = compute;
    this.logger.info({ shardId, compute }, 'compute share written');
  }

  /**
   * The shard's real usage per GPU, as measured now (0 where it holds nothing): real_bytes when
   * it changed, real_sampled_at_ms with it and at least every second. Synchronous writes once
   * the file is open (the sampler calls this for every shard at every sample).
   */
  async writeReal(
    shardId: string,
    realBytes: ReadonlyMap<string, number>,
    atMs: number,
  ): Promise<void> {
    const entry = this.entries.get(shardId);
    if (entry === undefined) return;
    const file = entry.file ?? (await this.mutex.run(shardId, () => this.openFile(shardId, entry)));
    if (file === undefined) return;
    const stamp = atMs - entry.stampedAt >= STAMP_MS;
    let changed = false;
    for (const gpuUuid of entry.capBytes.keys()) {
      const real = realBytes.get(gpuUuid) ?? 0;
      if (entry.real.get(gpuUuid) === real) continue;
      file.setSync(gpuUuid, 'real_bytes', real);
      entry.real.set(gpuUuid, real);
      changed = true;
    }
    if (!changed && !stamp) return;
    for (const gpuUuid of entry.capBytes.keys()) file.setSync(gpuUuid, 'real_sampled_at_ms', atMs);
    entry.stampedAt = atMs;
  }

  /**
   * Marks where the shard's GPU memory is (memory_state, read by libvgpu.so on every hooked
   * call). Throws when the shard has no limits file: a suspend must not go on unmarked.
   */
  setMemory(shardId: string, memory: MemoryMark): Promise<void> {
    return this.mutex.run(shardId, () =>
      this.withFile(shardId, async (file) => {
        await file.setMemory(memory);
        this.logger.info({ shardId, memory }, 'memory state written');
      }),
    );
  }

  /** What the shard's limits file says of its memory (resident when it has no file). */
  memory(shardId: string): Promise<MemoryMark> {
    return this.mutex.run(shardId, async () => {
      try {
        return await this.withFile(shardId, (file) => file.memory());
      } catch (error) {
        if ((error as NodeJS.ErrnoException).code === 'ENOENT') return 'resident';
        throw error;
      }
    });
  }

  /** The shard's caps summed over its GPUs, from what the agent holds or else its file. */
  capsTotal(shardId: string): Promise<number> {
    const entry = this.entries.get(shardId);
    if (entry !== undefined) {
      return Promise.resolve([...entry.capBytes.values()].reduce((sum, bytes) => sum + bytes, 0));
    }
    return this.mutex.run(shardId, () =>
      this.withFile(shardId, async (file) =>
        (await file.read()).reduce((sum, device) => sum + device.limitBytes, 0),
      ),
    );
  }

  /** The caps and policy of every shard the agent knows. */
  all(): ShardLimits[] {
    return [...this.entries].map(([shardId, entry]) => ({
      shardId,
      policy: entry.policy,
      capBytes: entry.capBytes,
    }));
  }

  get(shardId: string): ShardLimits | undefined {
    const entry = this.entries.get(shardId);
    return entry && { shardId, policy: entry.policy, capBytes: entry.capBytes };
  }

  remove(shardId: string): Promise<void> {
    return this.mutex.run(shardId, async () => {
      await this.closeFile(shardId);
      this.entries.delete(shardId);
      await fs.rm(this.file(shardId), { force: true });
    });
  }

  async onModuleDestroy(): Promise<void> {
    for (const shardId of [...this.entries.keys()]) await this.closeFile(shardId);
  }

  /** The fence's worst case, written into every file (docs/agent.md, "Pressure"). */
  private pressureWaitMs(): number {
    return pressureWaitMs(this.config.enforcement.intervalMs);
  }

  /** Runs `use` on the shard's open file, opening one for the call when the agent holds none. */
  private async withFile<T>(shardId: string, use: (file: LimitsFile) => Promise<T>): Promise<T> {
    const entry = this.entries.get(shardId);
    const held = entry === undefined ? undefined : await this.openFile(shardId, entry);
    if (held !== undefined) return use(held);
    const file = await LimitsFile.open(this.file(shardId));
    try {
      return await use(file);
    } finally {
      await file.close();
    }
  }

  private async openFile(shardId: string, entry: Entry): Promise<LimitsFile | undefined> {
    if (entry.file !== undefined) return entry.file;
    try {
      entry.file = await LimitsFile.open(this.file(shardId));
      // A file an earlier agent wrote (with another sample interval, or before the field).
      await entry.file.setPressureWait(this.pressureWaitMs());
      return entry.file;
    } catch (error) {
      if ((error as NodeJS.ErrnoException).code !== 'ENOENT') {
        this.logger.warn({ err: error, shardId }, 'cannot open a limits file');
      }
      return undefined;
    }
  }

  private async closeFile(shardId: string): Promise<void> {
    const entry = this.entries.get(shardId);
    const file = entry?.file;
    if (entry !== undefined) entry.file = undefined;
    await file?.close().catch(() => undefined);
  }
}
