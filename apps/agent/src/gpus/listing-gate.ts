/**
 * When a GPU's process listing must be taken again. Listing a GPU's processes through NVML
 * (compute and graphics lists) costs 0.18-0.84 ms per GPU on the H100, its used bytes
 * (`nvmlDeviceGetMemoryInfo`) 0.009 ms: on a host of 8 GPUs sampled every 50 ms, listing every
 * GPU at every sample alone passes the fence's 2 % of one core. So a GPU's last listing is
 * reused while nothing says it changed, and taken again when:
 * - its used bytes differ from those at its last listing (memory taken or given back);
 * - a process of its last listing is gone, or is one the fence killed and still waits to see
 *   gone: its memory may have been taken by another process within one interval, leaving the
 *   used bytes the same (a killed process can linger as a zombie, which signal 0 still finds);
 * - its last listing is RELIST_MS old: memory moved between live processes with the GPU's total
 *   unchanged within one interval (one frees what another takes) is seen within that.
 */
export const RELIST_MS = 500;

/** One GPU's last listing: what it held, by whom, and the used bytes when it was taken. */
export interface GpuListing<P extends { readonly pid: number }> {
  readonly usedBytes: number;
  readonly at: number;
  readonly processes: readonly P[];
}

export function mustRelist<P extends { readonly pid: number }>(
  last: GpuListing<P> | undefined,
  usedBytes: number,
  now: number,
  watch: ReadonlySet<number>,
  alive: (pid: number) => boolean,
): boolean {
  if (last === undefined || last.usedBytes !== usedBytes || now - last.at >= RELIST_MS) {
    return true;
  }
  return last.processes.some((process) => watch.has(process.pid) || !alive(process.pid));
}

/** Whether a process exists (signal 0); one of another user counts as alive. */
export function processAlive(pid: number): boolean {
  try {
    process.kill(pid, 0);
    return true;
  } catch (error) {
    return (error as NodeJS.ErrnoException).code !== 'ESRCH';
  }
}
