// CPU seconds of processes, read from /proc (Linux), for the benches' "CPU per request" figures.
import { spawnSync } from 'node:child_process';
import { readdirSync, readFileSync } from 'node:fs';

const CLOCK_TICKS = 100; // USER_HZ on Linux

/** A process's user + system CPU seconds; with `children`, its waited-for children's too. */
export function cpuOf(pid, children = false) {
  try {
    const stat = readFileSync(`/proc/${pid}/stat`, 'utf8');
    const f = stat
      .slice(stat.lastIndexOf(')') + 2)
      .split(' ')
      .map(Number);
    return (f[11] + f[12] + (children ? f[13] + f[14] : 0)) / CLOCK_TICKS;
  } catch {
    return 0;
  }
}

/** The pids whose parent is `parent`. */
export function childrenOf(parent) {
  const out = [];
  for (const entry of readdirSync('/proc')) {
    if (!/^\d+$/.test(entry)) continue;
    try {
      const stat = readFileSync(`/proc/${entry}/stat`, 'utf8');
      if (Number(stat.slice(stat.lastIndexOf(')') + 2).split(' ')[1]) === parent) {
        out.push(Number(entry));
      }
    } catch {
      // ended while being looked at
    }
  }
  return out;
}

/** CPU seconds of a postmaster and its children (the backends), ended ones included. */
export function postgresCpu(postmaster) {
  if (postmaster === undefined) return 0;
  return cpuOf(postmaster, true) + childrenOf(postmaster).reduce((sum, pid) => sum + cpuOf(pid), 0);
}

/** The postmaster of the PostgreSQL whose data folder is `dir` (its backends name it too). */
export function postmasterOf(dir) {
  for (const entry of readdirSync('/proc')) {
    if (!/^\d+$/.test(entry)) continue;
    try {
      const cmdline = readFileSync(`/proc/${entry}/cmdline`, 'utf8');
      if (cmdline.includes(dir) && cmdline.split('\0')[0].endsWith('postgres')) {
        const stat = readFileSync(`/proc/${entry}/stat`, 'utf8');
        const ppid = Number(stat.slice(stat.lastIndexOf(')') + 2).split(' ')[1]);
        if (!readFileSync(`/proc/${ppid}/cmdline`, 'utf8').includes(dir)) return Number(entry);
      }
    } catch {
      // ended while being looked at
    }
  }
  return undefined;
}

/**
 * Pins a running process, every thread of it, to a CPU list (the benches' --pin-* options):
 * `taskset -a -p`. Threads and processes it starts later inherit the mask (PostgreSQL's
 * backends too). Nothing when either is undefined.
 */
export function pin(pid, cpus) {
  if (cpus === undefined || pid === undefined) return;
  const run = spawnSync('taskset', ['-a', '-c', '-p', cpus, String(pid)], { encoding: 'utf8' });
  if (run.status !== 0) throw new Error(`taskset -p ${cpus} ${pid}: ${run.stderr}`);
}
