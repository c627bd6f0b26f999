/**
 * Which processes of a shard launched through libvgpu.so, process by process: NVML names a
 * process by its host PID, the shard's region by the PID it has in its container (its slot),
 * so a host PID is matched to a slot through /proc/<pid>/status's NSpid (the innermost one)
 * and the start time both sides read from /proc/<pid>/stat (field 22), which no namespace
 * changes and a reused PID does not share.
 */
import { readFileSync } from 'node:fs';
import { join } from 'node:path';

import type { RegionProcess } from '../regions/region-file.js';

/** A process as its own PID namespace names it. */
export interface NamespacedProcess {
  readonly nsPid: number;
  /** Clock ticks after boot; 0n when /proc did not say. */
  readonly startTime: bigint;
}

/** The PID that `hostPid` has in its innermost namespace and its start time; undefined: gone. */
export function namespacedProcess(
  procRoot: string,
  hostPid: number,
): NamespacedProcess | undefined {
  let status: string;
  try {
    status = readFileSync(join(procRoot, String(hostPid), 'status'), 'utf8');
  } catch {
    return undefined;
  }
  const line = status.split('\n').find((l) => l.startsWith('NSpid:'));
  const ids = line?.slice('NSpid:'.length).trim().split(/\s+/).map(Number) ?? [];
  const nsPid = ids.at(-1);
  if (nsPid === undefined || !Number.isSafeInteger(nsPid) || nsPid <= 0) return undefined;
  return { nsPid, startTime: startTimeOf(procRoot, hostPid) };
}

function startTimeOf(procRoot: string, hostPid: number): bigint {
  try {
    const stat = readFileSync(join(procRoot, String(hostPid), 'stat'), 'utf8');
    // The command name (field 2) may hold spaces and parentheses: count from the last ')'.
    const fields = stat.slice(stat.lastIndexOf(')') + 2).split(' ');
    return BigInt(fields[22 - 3] ?? '0');
  } catch {
    return 0n;
  }
}

/**
 * The last launch (CLOCK_MONOTONIC ns, the end of the second its slot names) of a process in
 * its shard's region: null when no slot is its own (it never charged memory through
 * libvgpu.so) or its slot shows no launch; undefined when the process is gone.
 */
export function ownLastLaunch(
  process: NamespacedProcess | undefined,
  slots: readonly RegionProcess[],
): bigint | null | undefined {
  if (process === undefined) return undefined;
  const slot = slots.find(
    (s) =>
      s.pid === process.nsPid &&
      (s.startTime === 0n || process.startTime === 0n || s.startTime === process.startTime),
  );
  if (slot === undefined || slot.lastLaunchSeconds === 0) return null;
  return BigInt(slot.lastLaunchSeconds + 1) * 1_000_000_000n - 1n;
}
