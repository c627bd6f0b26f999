#!/usr/bin/env node
// A neighbour is never harmed (issue #31, point 5) on a real GPU, through the agent's own fence
// and region watch (as bench/host-fence/h100.mjs runs the fence, without Docker):
//   - an outside process fills the card until --free-gib are free;
//   - shard N (cap --n-cap-gib, libvgpu.so, the agent's limits file and region) runs training
//     steps whose memory keeps growing inside its cap;
//   - shard O (cap --o-cap-gib) has a process without libvgpu.so that, once N holds --arm-mib,
//     takes everything the card has free in one allocation;
//   - the agent's EnforcementService (--interval ms, policy kill) kills O; libvgpu.so's retry
//     (a pressure ring makes the fence sample at once) keeps N's refused allocations waiting.
// --trials trials with the retry on (the agent's pressure_wait_ms) and as many with it off
// (GPUSHARDS_PRESSURE_WAIT_MS=0 in N), alternating, side by side in one run. Counts N's
// OutOfMemoryErrors and the extra latency of its steps while O held the card.
//
//   node neighbour_agent.mjs --lib libvgpu.so [--trials 20] [--free-gib 14] [--n-cap-gib 8]
//       [--o-cap-gib 4] [--interval 50] [--out FILE]
import { spawn } from 'node:child_process';
import { appendFileSync, existsSync, mkdirSync, mkdtempSync, rmSync, rmdirSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { dirname, join, resolve } from 'node:path';
import { createInterface } from 'node:readline';
import { fileURLToPath } from 'node:url';
import { parseArgs } from 'node:util';

const here = dirname(fileURLToPath(import.meta.url));
const repo = resolve(here, '../..');
const agentDist = process.env.GPUSHARDS_AGENT_DIST ?? join(repo, 'apps/agent/dist');
const { values } = parseArgs({
  options: {
    lib: { type: 'string' },
    out: { type: 'string' },
    python: { type: 'string', default: 'python3' },
    trials: { type: 'string', default: '20' },
    'free-gib': { type: 'string', default: '14' },
    'n-cap-gib': { type: 'string', default: '8' },
    'o-cap-gib': { type: 'string', default: '4' },
    'step-mib': { type: 'string', default: '64' },
    'arm-mib': { type: 'string', default: '2048' },
    steps: { type: 'string', default: '160' },
    interval: { type: 'string', default: '50' },
  },
});
const GiB = 2 ** 30;
const MiB = 2 ** 20;
const lib = resolve(values.lib ?? '/tmp/gpushards-native/libvgpu.so');
const trials = Number(values.trials);

const { GpusService } = await import(join(agentDist, 'gpus/gpus.service.js'));
const { LimitsService } = await import(join(agentDist, 'limits/limits.service.js'));
const { RegionWatchService } = await import(join(agentDist, 'regions/region-watch.service.js'));
const { EnforcementService } = await import(join(agentDist, 'enforcement/enforcement.service.js'));
const { ProcessOwners } = await import(join(agentDist, 'enforcement/process-owners.js'));
const { AgentMetrics } = await import(join(agentDist, 'metrics/agent-metrics.js'));
const { createLogger } = await import(join(agentDist, 'logging/logger.js'));

const rows = [];
function emit(row) {
  rows.push(row);
  const text = JSON.stringify(row);
  console.log(text);
  if (values.out) appendFileSync(values.out, text + '\n');
}
const pct = (list, p) => {
  if (list.length === 0) return null;
  const sorted = [...list].sort((a, b) => a - b);
  return sorted[Math.min(sorted.length - 1, Math.ceil((p / 100) * sorted.length) - 1)];
};
const round = (x, digits = 1) => (x === null ? null : Math.round(x * 10 ** digits) / 10 ** digits);

const work = mkdtempSync(join(tmpdir(), 'gpushards-neighbour-'));
const cgroupRoot = '/sys/fs/cgroup/gpushards-neighbour-bench';
mkdirSync(cgroupRoot, { recursive: true });
const containerOf = (id) => Buffer.from(id.padEnd(32, '0')).toString('hex').slice(0, 64);
const config = {
  hostId: 'neighbour-bench',
  stateDir: join(work, 'state'),
  regionRoot: join(work, 'regions'),
  computeTurns: 'cpu',
  gpus: { kind: 'nvml' },
  enforcement: {
    intervalMs: Number(values.interval),
    toleranceBytes: 160 * MiB,
    allowedProcesses: [],
    procRoot: '/proc',
  },
};
const logger = createLogger(process.env.GPUSHARDS_BENCH_LOG ?? 'silent', 'bench');
const gpus = new GpusService(config, logger);
const gpu = gpus.inventory.gpus[0];
const limits = new LimitsService(config, logger);
const regionWatch = new RegionWatchService(config, logger);
const metrics = new AgentMetrics();
const records = [];
const shards = { list: () => records, stop: async () => ({ wasRunning: true }) };
const enforcement = new EnforcementService(
  config,
  gpus,
  shards,
  limits,
  new ProcessOwners('/proc'),
  metrics,
  regionWatch,
  logger,
);
const killedAt = new Map();
enforcement.onViolations((done) => {
  const t = process.hrtime.bigint();
  for (const v of done) for (const pid of v.killedPids) if (!killedAt.has(pid)) killedAt.set(pid, t);
});

const children = new Set();
/**
 * Every process of the run gone, and what they forked (each shard's cgroup killed whole: a
 * trial's child may hold the card), whatever ends the run: elastic.sh's time limit sends SIGTERM.
 */
function killAll() {
  for (const c of children) c.kill('SIGKILL');
  for (const dir of [`docker-${containerOf('N')}.scope`, `docker-${containerOf('O')}.scope`, 'outside']) {
    const kill = join(cgroupRoot, dir, 'cgroup.kill');
    if (existsSync(kill)) writeFileSync(kill, '1');
  }
}
for (const signal of ['SIGTERM', 'SIGINT']) {
  process.once(signal, () => {
    killAll();
    try {
      summarise();
    } catch {
      // stopped before the trials began
    }
    printTable(`stopped by ${signal}`);
    process.exit(1);
  });
}
process.once('uncaughtException', (error) => {
  killAll();
  console.error(error);
  printTable(`stopped by ${error.name}: ${error.message}`);
  process.exit(1);
});
function server(args, env = {}) {
  const child = spawn(values.python, [join(here, 'neighbour_worker.py'), ...args], {
    stdio: ['pipe', 'pipe', 'inherit'],
    env: { ...process.env, PYTHONUNBUFFERED: '1', ...env },
  });
  children.add(child);
  const lines = createInterface({ input: child.stdout });
  const waiting = [];
  const queued = [];
  lines.on('line', (line) => {
    const i = waiting.findIndex((w) => w.match(line));
    if (i >= 0) waiting.splice(i, 1)[0].resolve(line);
    else queued.push(line);
    child.lastLines = [...(child.lastLines ?? []).slice(-200), line];
  });
  // A line that never comes ends the run with what the worker said last, not a silent hang.
  child.next = (match, timeoutMs = 120_000) =>
    new Promise((resolveLine, reject) => {
      const i = queued.findIndex(match);
      if (i >= 0) return resolveLine(queued.splice(i, 1)[0]);
      const timer = setTimeout(() => {
        reject(
          new Error(
            `no line ${match} from ${args[0]} in ${timeoutMs} ms; it said last:\n${(child.lastLines ?? []).slice(-12).join('\n')}`,
          ),
        );
      }, timeoutMs);
      waiting.push({
        match,
        resolve: (line) => {
          clearTimeout(timer);
          resolveLine(line);
        },
      });
    });
  return child;
}

async function shard(id, capBytes) {
  const dir = join(cgroupRoot, `docker-${containerOf(id)}.scope`);
  mkdirSync(dir, { recursive: true });
  records.push({ shardId: id, teamId: 'bench', containerId: containerOf(id), state: 'RUNNING', gpuUuids: [gpu.uuid] });
  await limits.prepare(id, [{ uuid: gpu.uuid, limitBytes: capBytes }], gpus.inventory.contextOverheadBytes, 'kill');
  // The region's folder before the watch, as the agent's RegionsService.prepare does: a watch
  // on a folder that is not there yet hears a pressure ring only at its periodic read (1 s).
  mkdirSync(join(config.regionRoot, id), { recursive: true });
  regionWatch.add(id);
  return join(dir, 'cgroup.procs');
}
const shardEnv = (id) => ({
  LD_PRELOAD: lib,
  GPUSHARDS_LIMITS_PATH: limits.file(id),
  GPUSHARDS_REGION_PATH: join(config.regionRoot, id, 'region'),
});

// The card filled from outside until --free-gib are free (a process of no shard).
const filler = spawn(values.python, ['-c', `import torch,sys
free,_=torch.cuda.mem_get_info(); x=torch.empty(max(0, free - ${Number(values['free-gib']) * GiB}), dtype=torch.uint8, device="cuda"); torch.cuda.synchronize()
print("held", torch.cuda.mem_get_info()[0], flush=True); sys.stdin.readline()`], { stdio: ['pipe', 'pipe', 'inherit'] });
children.add(filler);
// In a cgroup of the run's own (no shard's: the fence counts it as memory of no shard), so that
// killAll finds it whatever ends the run.
mkdirSync(join(cgroupRoot, 'outside'), { recursive: true });
writeFileSync(join(cgroupRoot, 'outside', 'cgroup.procs'), String(filler.pid));
const [, freeAfter] = (await new Promise((r) => createInterface({ input: filler.stdout }).once('line', r))).split(' ');
emit({ check: 'card', gpu: gpu.model, freeGiB: round(Number(freeAfter) / GiB, 2), nCapGiB: Number(values['n-cap-gib']), oCapGiB: Number(values['o-cap-gib']), intervalMs: Number(values.interval) });

const nJoin = await shard('N', Number(values['n-cap-gib']) * GiB);
const oJoin = await shard('O', Number(values['o-cap-gib']) * GiB);
enforcement.start();
const trainArgs = [nJoin, String(Number(values['n-cap-gib']) * 1024 - 512), values['step-mib'], values.steps, values['arm-mib']];
const modes = {
  retry: server(['train', ...trainArgs], shardEnv('N')),
  off: server(['train', ...trainArgs], { ...shardEnv('N'), GPUSHARDS_PRESSURE_WAIT_MS: '0' }),
};
const grabber = server(['grab', oJoin]);
for (const s of [...Object.values(modes), grabber]) await s.next((l) => l.startsWith('joined'));

const results = { retry: [], off: [] };
for (let t = 0; t < trials * 2; t++) {
  const mode = t % 2 === 0 ? 'retry' : 'off';
  const n = modes[mode];
  const startedAt = Date.now();
  n.stdin.write(`trial ${t}\n`);
  await n.next((l) => l.startsWith(`armed ${t} `));
  grabber.stdin.write(`go ${t}\n`);
  // "grabbing", not "grabbed": the fence may kill the grab between the allocation and its report.
  const grabbing = (await grabber.next((l) => l.startsWith(`grabbing ${t} `))).split(' ');
  const done = (await n.next((l) => l.startsWith(`done ${t} `))).split(' ');
  await n.next((l) => l.startsWith(`exit ${t} `));
  const gone = (await grabber.next((l) => l.startsWith(`gone ${t} `))).split(' ');
  const grabStart = BigInt(grabbing[3]);
  const offenderPid = Number(grabbing[2]);
  const killed = killedAt.get(offenderPid);
  const steps = (n.lastLines ?? [])
    .filter((l) => l.startsWith(`step ${t} `))
    .map((l) => l.split(' '))
    .map(([, , , s, e]) => ({ start: BigInt(s), ms: Number(BigInt(e) - BigInt(s)) / 1e6 }));
  const before = steps.filter((s) => s.start < grabStart).map((s) => s.ms);
  const during = steps.filter((s) => s.start >= grabStart && (killed === undefined || s.start <= killed + 500_000_000n)).map((s) => s.ms);
  const trial = {
    startedAt,
    endedAt: Date.now(),
    ooms: Number(done[3]),
    killedMs: killed === undefined ? null : Number(killed - grabStart) / 1e6,
    signal: Number(gone[3]),
    baseMs: pct(before, 50),
    worstMs: during.length === 0 ? null : Math.max(...during),
  };
  results[mode].push(trial);
  // Each trial as it ends: a run cut short by its time limit still has its trials.
  const { startedAt: _s, endedAt: _e, ...shown } = trial;
  emit({ check: 'trial', t, retry: mode === 'retry', ...shown });
}
summarise();
const text = await metrics.text();
if (text) emit({ check: 'pressure metrics', lines: text.split('\n').filter((l) => l.startsWith('gpushards_agent_pressure') && !l.startsWith('#')).slice(0, 8) });
killAll();
await enforcement.onModuleDestroy?.();
await regionWatch.onModuleDestroy?.();
await limits.onModuleDestroy();
gpus.onModuleDestroy?.();
for (const dir of [`docker-${containerOf('N')}.scope`, `docker-${containerOf('O')}.scope`, 'outside']) {
  try {
    rmdirSync(join(cgroupRoot, dir));
  } catch {
    // a process may still be leaving it
  }
}
rmSync(work, { recursive: true, force: true });
printTable();
process.exit(0);

/**
 * Per mode, over its trials: N's refusals, the kill, N's extra step latency, and the agent's
 * pressure episodes (a ring of N's to the offender's memory no longer listed by NVML: the
 * fence's pressure relief), each given to the trial whose time it rang in.
 */
function summarise() {
  const reliefs = enforcement.takePressureReliefs();
  for (const mode of ['retry', 'off']) {
    const list = results[mode];
    const extra = list.filter((r) => r.worstMs !== null && r.baseMs !== null).map((r) => r.worstMs - r.baseMs);
    const mine = reliefs.filter((r) => {
      const at = Date.parse(r.at);
      return list.some((trial) => at >= trial.startedAt && at <= trial.endedAt);
    });
    const relief = mine.filter((r) => r.reliefSeconds !== undefined).map((r) => r.reliefSeconds * 1000);
    emit({
      check: `neighbour, retry ${mode === 'retry' ? 'on' : 'off'}`,
      trials: list.length,
      trialsWithFailures: list.filter((r) => r.ooms > 0).length,
      neighbourFailures: list.reduce((s, r) => s + r.ooms, 0),
      offenderKilled: list.filter((r) => r.killedMs !== null).length,
      killP50ms: round(pct(list.map((r) => r.killedMs).filter((x) => x !== null), 50)),
      killP99ms: round(pct(list.map((r) => r.killedMs).filter((x) => x !== null), 99)),
      extraStepP50ms: round(pct(extra, 50)),
      extraStepP99ms: round(pct(extra, 99)),
      stepP50ms: round(pct(list.map((r) => r.baseMs).filter((x) => x !== null), 50), 2),
      pressureEpisodes: mine.length,
      relieved: relief.length,
      pressureToFreeP50ms: round(pct(relief, 50)),
      pressureToFreeP99ms: round(pct(relief, 99)),
      pressureToFreeMaxMs: round(relief.length === 0 ? null : Math.max(...relief)),
    });
  }
}

function printTable(note) {
  console.log(`\n| check | result |\n| --- | --- |${note === undefined ? '' : `\n| ${note} | |`}`);
  for (const row of rows) {
    const { check, ...rest } = row;
    console.log(`| ${check} | ${Object.entries(rest).map(([k, v]) => `${k}=${JSON.stringify(v)}`).join(' ')} |`);
  }
}
