/**
 * Each shard's GPU time held, read from the host's compute ledger (one file per GPU, written by
 * libvgpu.so in every shard: native/vgpu/include/gpushards_ledger.h, docs/compute.md). A member
 * entry is a shard: busy_ns is the GPU time it has held, on CLOCK_MONOTONIC, which the host and
 * its containers share (process.hrtime is the same clock). When a shard last launched is read
 * from its own region instead (launch-stamps.ts): every shard can write the ledger, so a
 * neighbour could erase a stamp there and have the idle policy stop a busy shard.
 */
import { promises as fs } from 'node:fs';
import { join } from 'node:path';

export const LEDGER_MAGIC = 0x31524744454c5047n; // "GPLEDGR1"
export const LEDGER_VERSION = 1;
export const LEDGER_MEMBERS = 32;
export const LEDGER_HEADER_SIZE = 128;
export const LEDGER_MEMBER_SIZE = 128;
export const LEDGER_SIZE = LEDGER_HEADER_SIZE + LEDGER_MEMBERS * LEDGER_MEMBER_SIZE;
/** Offsets inside a member entry (gpushards_ledger_member). */
export const LEDGER_MEMBER_FIELDS = {
  shard: { offset: 0, size: 48 },
  share_permille: { offset: 48, size: 4 },
  mode: { offset: 52, size: 4 },
  busy_ns: { offset: 64, size: 8 },
  last_kernel_ns: { offset: 72, size: 8 },
} as const;

export interface LedgerMember {
  readonly shardId: string;
  readonly sharePermille: number;
  readonly busyNs: bigint;
  /** 0n = never launched. */
  readonly lastKernelNs: bigint;
}

/** The members of one GPU's ledger file; [] for a file that is not a ledger this agent reads. */
export function decodeLedger(buffer: Buffer): LedgerMember[] {
  if (buffer.length < LEDGER_SIZE || buffer.readBigUInt64LE(0) !== LEDGER_MAGIC) return [];
  if (buffer.readUInt32LE(8) !== LEDGER_VERSION || buffer.readUInt32LE(12) !== LEDGER_MEMBERS)
    return [];
  const members: LedgerMember[] = [];
  for (let i = 0; i < LEDGER_MEMBERS; i++) {
    const base = LEDGER_HEADER_SIZE + i * LEDGER_MEMBER_SIZE;
    const raw = buffer.subarray(base, base + LEDGER_MEMBER_FIELDS.shard.size);
    const end = raw.indexOf(0);
    const shardId = raw.subarray(0, end < 0 ? raw.length : end).toString('utf8');
    if (shardId === '') continue;
    members.push({
      shardId,
      sharePermille: buffer.readUInt32LE(base + LEDGER_MEMBER_FIELDS.share_permille.offset),
      busyNs: buffer.readBigUInt64LE(base + LEDGER_MEMBER_FIELDS.busy_ns.offset),
      lastKernelNs: buffer.readBigUInt64LE(base + LEDGER_MEMBER_FIELDS.last_kernel_ns.offset),
    });
  }
  return members;
}

export interface GpuActivity {
  readonly gpuUuid: string;
  /** GPU time held over the time since the previous sample, 0..1; absent on the first sample. */
  readonly busyRatio?: number;
}

/**
 * Samples the ledger folder; busy ratios are deltas between consecutive samples of the same
 * shard and GPU. `now` is CLOCK_MONOTONIC in ns (injectable for tests).
 */
export class LedgerActivity {
  private previous = new Map<string, { busyNs: bigint; at: bigint }>();

  constructor(
    private readonly dir: string,
    private readonly now: () => bigint = () => process.hrtime.bigint(),
  ) {}

  /** shardId -> its activity per GPU. A missing folder reads as no activity. */
  async sample(): Promise<Map<string, GpuActivity[]>> {
    const at = this.now();
    const out = new Map<string, GpuActivity[]>();
    let files: string[];
    try {
      files = await fs.readdir(this.dir);
    } catch (error) {
      if ((error as NodeJS.ErrnoException).code === 'ENOENT') return out;
      throw error;
    }
    const next = new Map<string, { busyNs: bigint; at: bigint }>();
    for (const file of files) {
      if (!/^GPU-[0-9a-f-]{36}$/i.test(file)) continue;
      const gpuUuid = file.toLowerCase();
      let members: LedgerMember[];
      try {
        members = decodeLedger(await fs.readFile(join(this.dir, file)));
      } catch {
        continue; // removed meanwhile
      }
      for (const m of members) {
        const key = `${m.shardId}\u0000${gpuUuid}`;
        const before = this.previous.get(key);
        next.set(key, { busyNs: m.busyNs, at });
        const span = before !== undefined ? Number(at - before.at) : 0;
        const busy = before !== undefined ? Number(m.busyNs - before.busyNs) : 0;
        const activity: GpuActivity = {
          gpuUuid,
          ...(span > 0 ? { busyRatio: Math.min(1, Math.max(0, busy / span)) } : {}),
        };
        const list = out.get(m.shardId) ?? [];
        list.push(activity);
        out.set(m.shardId, list);
      }
    }
    this.previous = next;
    return out;
  }
}

/**
 * Creates the host's ledger folder before a shard mounts it: every shard's processes (any
 * user) create and share the per-GPU files there, like /tmp (mode 1777).
 */
export async function prepareLedgerDir(dir: string): Promise<void> {
  await fs.mkdir(dir, { recursive: true });
  await fs.chmod(dir, 0o1777);
}
