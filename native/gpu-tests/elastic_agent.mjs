#!/usr/bin/env node
// Elastic GPU memory on a real GPU (issue #30, point 6), through the agent's own services and the
// queue's own decisions, without Docker (as bench/host-fence/h100.mjs runs the fence):
//   - the GPU is offered to shards only in part (--offer-gib): an outside process holds the rest;
//   - --shards elastic shards with caps of --cap-gib each (their caps sum to several times the
//     offer), each one process of elastic_worker.py under libvgpu.so with the agent's limits file
//     and region, in a real cgroup v2 (the agent's checkpoint calls find it there);
//   - the admission is libs/limits' admit() over a one-GPU fleet of --offer-gib at ratio --ratio:
//     it places new shards, resumes woken ones on their GPU and suspends idle ones to make room;
//   - moves are the agent's executeMove over its koffi checkpoint driver, marks its LimitsService;
//     wakes reach it through its RegionWatchService (the bell libvgpu.so rings).
// Then the raw API (checkpoint_raw.py) and the agent's move on twin processes, side by side.
//
//   node elastic_agent.mjs --lib libvgpu.so [--offer-gib 32] [--shards 12] [--cap-gib 8]
//       [--ratio 3] [--bursts 3] [--idle-s 8] [--burst-s 1] [--raw-gib 20] [--out FILE]
//       [--turns cpu|gpu] [--compute-share PERCENT]
// --compute-share gives every tenant a CAPPED share (a ledger of the run's own), so that tenants
// computing at once take turns: with --turns gpu each process then registers its gate page with
// the driver (cuMemHostRegister) and is checkpointed with it; --raw-gib 0 leaves out part 2.
// Prints one JSON line per check, and a table last.
import { spawn } from 'node:child_process';
import { appendFileSync, existsSync, mkdirSync, mkdtempSync, readFileSync, rmSync, rmdirSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { dirname, join, resolve } from 'node:path';
import { performance } from 'node:perf_hooks';
import { createInterface } from 'node:readline';
import { fileURLToPath } from 'node:url';
import { parseArgs } from 'node:util';

const here = dirname(fileURLToPath(import.meta.url));
const repo = resolve(here, '../..');
const agentDist = process.env.GPUSHARDS_AGENT_DIST ?? join(repo, 'apps/agent/dist');
const limitsDist = process.env.GPUSHARDS_LIMITS_DIST ?? join(repo, 'libs/limits/dist');
const { values } = parseArgs({
  options: {
    lib: { type: 'string' },
    out: { type: 'string' },
    python: { type: 'string', default: 'python3' },
    'offer-gib': { type: 'string', default: '32' },
    shards: { type: 'string', default: '12' },
    'cap-gib': { type: 'string', default: '8' },
    ratio: { type: 'string', default: '3' },
    bursts: { type: 'string', default: '3' },
    'idle-s': { type: 'string', default: '8' },
    'burst-s': { type: 'string', default: '1' },
    'raw-gib': { type: 'string', default: '20' },
    turns: { type: 'string', default: 'cpu' },
    'compute-share': { type: 'string' },
  },
});
const GiB = 2 ** 30;
const MiB = 2 ** 20;
const lib = resolve(values.lib ?? '/tmp/gpushards-native/libvgpu.so');
const offer = Number(values['offer-gib']) * GiB;
const capBytes = Number(values['cap-gib']) * GiB;
const shardCount = Number(values.shards);

const { Nvml } = await import(join(agentDist, 'gpus/nvml.js'));
const { NvmlBackend } = await import(join(agentDist, 'gpus/gpu-backends.js'));
const { LimitsService } = await import(join(agentDist, 'limits/limits.service.js'));
const { RegionWatchService } = await import(join(agentDist, 'regions/region-watch.service.js'));
const { openCheckpointApi } = await import(join(agentDist, 'memory/checkpoint-driver.js'));
const { executeMove } = await import(join(agentDist, 'memory/memory-move.js'));
const { createLogger } = await import(join(agentDist, 'logging/logger.js'));
const L = await import(join(limitsDist, 'index.js'));

/** ELASTIC_TRACE=1: every decision, move and tenant line on stderr, as it happens. */
const trace = process.env.ELASTIC_TRACE === '1' ? (...args) => console.error(`[${(performance.now() / 1000).toFixed(2)}]`, ...args) : () => {};
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

const work = mkdtempSync(join(tmpdir(), 'gpushards-elastic-'));
const cgroupRoot = '/sys/fs/cgroup/gpushards-elastic-bench';
mkdirSync(cgroupRoot, { recursive: true });
const config = {
  hostId: 'elastic-bench',
  stateDir: join(work, 'state'),
  regionRoot: join(work, 'regions'),
  computeTurns: values.turns,
  // The fence's period: the limits file's pressure wait is derived from it (issue #31).
  enforcement: { intervalMs: 50 },
};
const logger = createLogger('silent', 'bench');
const backend = new NvmlBackend(Nvml.open('libnvidia-ml.so.1'), 'libcuda.so.1');
const gpu = backend.gpus[0];
const contextBytes = backend.measureContextBytes();
const limits = new LimitsService(config, logger);
const regionWatch = new RegionWatchService(config, logger);
const driver = openCheckpointApi('libcuda.so.1');

/** The driver's calls, timed: what the agent adds around them is the orchestration's cost. */
const callMs = { current: 0 };
const api = Object.fromEntries(
  ['state', 'lock', 'checkpoint', 'restore', 'unlock'].map((name) => [
    name,
    async (...args) => {
      const t = performance.now();
      try {
        return await driver[name](...args);
      } finally {
        if (name !== 'state') callMs.current += performance.now() - t;
      }
    },
  ]),
);
api.libraryPath = driver.libraryPath;

const children = new Set();
/**
 * Every process of the run gone, and what they forked (their cgroups killed whole), whatever
 * ends the run: elastic.sh's time limit sends SIGTERM, and a tenant left behind would keep its
 * GPU memory (or its checkpoint's host memory) through the next step.
 */
function killAll() {
  for (const c of children) c.kill('SIGKILL');
  for (const id of cgroupsMade) {
    const kill = join(cgroupRoot, id, 'cgroup.kill');
    if (existsSync(kill)) writeFileSync(kill, '1');
  }
}
for (const signal of ['SIGTERM', 'SIGINT']) {
  process.once(signal, () => {
    killAll();
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
function python(args, env = {}) {
  const child = spawn(values.python, args, {
    stdio: ['pipe', 'pipe', 'inherit'],
    env: { ...process.env, PYTHONUNBUFFERED: '1', ...env },
  });
  children.add(child);
  child.on('exit', () => children.delete(child));
  return child;
}

const cgroupsMade = new Set();
function cgroupOf(id) {
  const dir = join(cgroupRoot, id);
  mkdirSync(dir, { recursive: true });
  cgroupsMade.add(id);
  return dir;
}
async function processesOf(id) {
  const pids = readFileSync(join(cgroupOf(id), 'cgroup.procs'), 'utf8')
    .split('\n')
    .filter((line) => line !== '')
    .map(Number);
  const known = [];
  for (const pid of pids) {
    const state = await driver.state(pid);
    if (state !== undefined) known.push({ pid, state });
  }
  return known;
}
function gpuBytesByPid() {
  const map = new Map();
  for (const p of backend.processes() ?? []) map.set(p.pid, (map.get(p.pid) ?? 0) + p.bytes);
  return map;
}

/** One move of shard `id`, the agent's way; what it took and what the driver's calls took. */
async function move(id, direction, bytesBefore = new Map()) {
  const bytes = direction === 'suspend' ? gpuBytesByPid() : bytesBefore;
  callMs.current = 0;
  const outcome = await executeMove(direction, {
    api,
    processes: () => processesOf(id),
    mark: (memory) => limits.setMemory(id, memory),
    bytesOf: (pid) => bytes.get(pid) ?? 0,
    progress: () => {},
    lockTimeoutMs: 10_000,
  });
  return { outcome, driverMs: callMs.current, bytes };
}

async function holdOutside(bytes) {
  const child = python([
    '-c',
    `import torch,sys,time; x=torch.empty(${bytes}, dtype=torch.uint8, device="cuda"); torch.cuda.synchronize(); print("held", flush=True); sys.stdin.readline()`,
  ]);
  // In a cgroup of the run's own (no shard's), so that killAll finds it whatever ends the run.
  writeFileSync(join(cgroupOf('outside'), 'cgroup.procs'), String(child.pid));
  for await (const line of createInterface({ input: child.stdout })) if (line === 'held') break;
  return child;
}

const computeShare =
  values['compute-share'] === undefined
    ? undefined
    : { sharePermille: Number(values['compute-share']) * 10, mode: 'CAPPED' };
const ledger = join(work, 'ledger');
mkdirSync(ledger, { recursive: true });
const shardEnv = (id) => ({
  LD_PRELOAD: lib,
  GPUSHARDS_LIMITS_PATH: limits.file(id),
  GPUSHARDS_REGION_PATH: join(config.regionRoot, id, 'region'),
  ...(computeShare === undefined
    ? {}
    : { GPUSHARDS_LEDGER_DIR: ledger, GPUSHARDS_SHARD_ID: id, GPUSHARDS_COMPUTE_STATS: '1' }),
});

// ---------------------------------------------------------------------------------------
// 1. Bursty tenants on an oversubscribed GPU.

const freeNow = () => gpu.totalBytes - backend.sample()[0].usedBytes;
const filler = await holdOutside(Math.max(0, freeNow() - offer));
emit({ check: 'offer', gpu: gpu.model, freeGiB: round(freeNow() / GiB, 2), offerGiB: offer / GiB, capsGiB: (capBytes * shardCount) / GiB, ratio: Number(values.ratio), contextMiB: round(contextBytes / MiB) });

const team = { id: 'bench', guarantee: { bytes: 0 }, decayedGiBHours: 0 };
const shards = [];
for (let i = 0; i < shardCount; i++) {
  const id = `e${i}`;
  // Half the tenants hold a quarter of their cap, half three quarters: wake latency by size.
  const dataMiB = Math.floor(((i % 2 === 0 ? 0.25 : 0.7) * capBytes) / MiB);
  await limits.prepare(id, [{ uuid: gpu.uuid, limitBytes: capBytes }], contextBytes, 'report', computeShare);
  // The region's folder before the watch, as the agent's RegionsService.prepare does: a watch
  // on a folder that is not there yet hears a ring only at its periodic read (1 s later).
  mkdirSync(join(config.regionRoot, id), { recursive: true });
  regionWatch.add(id);
  shards.push({ id, dataMiB, state: 'waiting', idleSince: undefined, resumeWantedAt: undefined, busy: false, done: false, wakes: [], bursts: [], moves: [] });
}
const byId = new Map(shards.map((s) => [s.id, s]));
const events = [];
let moving = false;
let decideMs = [];

function fleetNow() {
  const resident = shards.filter((s) => s.state === 'resident' || s.state === 'suspending' || s.state === 'resuming');
  const suspended = shards.filter((s) => s.state === 'suspended');
  return [
    {
      id: L.hostId('h'),
      name: 'h',
      state: 'ONLINE',
      labels: {},
      contextOverheadBytes: L.bytes(0),
      suspendBudgetBytes: L.bytes(capBytes * shardCount),
      suspendedBytes: L.bytes(capBytes * shards.filter((s) => s.state !== 'waiting' && s.state !== 'resident').length),
      gpus: [
        {
          uuid: L.gpuUuid(gpu.uuid),
          index: 0,
          model: gpu.model,
          totalBytes: L.bytes(offer),
          reservedBytes: L.bytes(capBytes * resident.length),
          suspendedBytes: L.bytes(capBytes * suspended.length),
          overcommitRatio: Number(values.ratio),
        },
      ],
    },
  ];
}

function held(s) {
  return {
    id: s.id,
    teamId: team.id,
    hostId: L.hostId('h'),
    gpuUuids: [L.gpuUuid(gpu.uuid)],
    reservedBytesPerGpu: L.bytes(capBytes),
    quotaBytes: L.bytes(capBytes),
    gpuModel: gpu.model,
    priorityRank: 1,
    preemptible: true,
    placedAt: 0,
    leaving: s.state !== 'resident',
    elastic: true,
    ...(s.state === 'resident' && !s.busy && s.idleSince !== undefined ? { idleSince: s.idleSince } : {}),
  };
}
function suspendedOf(s) {
  return { id: s.id, teamId: team.id, hostId: L.hostId('h'), gpuUuids: [L.gpuUuid(gpu.uuid)], reservedBytesPerGpu: L.bytes(capBytes), quotaBytes: L.bytes(capBytes) };
}
const request = { bytesPerGpu: L.bytes(capBytes), gpuCount: 1 };

/** One admission pass over the bench's fleet, applied: placements start, suspends and resumes move. */
async function schedule() {
  if (moving) return;
  const t = performance.now();
  const plan = L.admit({
    fleet: fleetNow(),
    held: shards.filter((s) => ['resident', 'suspending', 'resuming'].includes(s.state)).map(held),
    pending: [
      ...shards.filter((s) => s.state === 'waiting').map((s, n) => ({ id: s.id, teamId: team.id, request, priorityRank: 1, preemptible: true, arrivedAt: n })),
      ...shards
        .filter((s) => s.state === 'suspended' && s.resumeWantedAt !== undefined)
        .map((s) => ({ id: s.id, teamId: team.id, request, priorityRank: 1, preemptible: true, arrivedAt: s.resumeWantedAt, resume: suspendedOf(s) })),
    ],
    suspended: shards.filter((s) => s.state === 'suspended').map(suspendedOf),
    teams: [team],
    now: Date.now(),
  });
  decideMs.push(performance.now() - t);
  trace('plan', { placed: plan.placements.map((p) => p.shardId), suspend: plan.suspensions.map((x) => x.shardId), resume: plan.resumes.map((x) => x.shardId), waiting: plan.waiting.length });
  for (const p of plan.placements) start(byId.get(p.shardId));
  const first = plan.suspensions[0] ?? plan.resumes[0];
  if (first === undefined) return;
  moving = true;
  try {
    for (const s of plan.suspensions) await moveShard(byId.get(s.shardId), 'suspend');
    for (const r of plan.resumes) await moveShard(byId.get(r.shardId), 'resume');
  } finally {
    moving = false;
  }
  setImmediate(() => void schedule());
}

async function moveShard(s, direction) {
  s.state = direction === 'suspend' ? 'suspending' : 'resuming';
  const began = performance.now();
  trace('move begins', s.id, direction);
  const { outcome, driverMs, bytes } = await move(s.id, direction, s.bytesOut);
  trace('move ends', s.id, direction, outcome.ok ? 'ok' : outcome.reason, ((performance.now() - began) / 1000).toFixed(2), 's');
  if (direction === 'suspend') s.bytesOut = bytes;
  const record = { shard: s.id, direction, ok: outcome.ok, seconds: (performance.now() - began) / 1000, driverMs, overheadMs: (performance.now() - began) - driverMs, bytes: outcome.ok ? outcome.bytes : 0, reason: outcome.ok ? undefined : outcome.reason };
  s.moves.push(record);
  events.push(record);
  if (!outcome.ok) {
    emit({ check: 'move failed', ...record });
    s.state = direction === 'suspend' ? 'resident' : 'suspended';
    return;
  }
  s.state = direction === 'suspend' ? 'suspended' : 'resident';
  if (direction === 'resume') {
    // Resumed because its process is in a CUDA call: busy until its burst ends, never idle
    // (suspending it again at once, before the call goes on, would starve it).
    s.resumeWantedAt = undefined;
    s.busy = true;
    s.idleSince = undefined;
  }
}

function start(s) {
  s.state = 'resident';
  s.child.stdin.write('go\n');
}

regionWatch.onWake((ring) => {
  const s = byId.get(ring.shardId);
  if (s === undefined || s.resumeWantedAt !== undefined) return;
  s.ringAt = performance.now();
  if (s.state === 'suspended' || s.state === 'suspending') {
    s.resumeWantedAt = Date.now();
    void schedule();
  }
});

// CLOCK_MONOTONIC ns, as the tenants stamp their lines (process.hrtime is the same clock).
let firstReadyNs;
let lastDoneNs;
await Promise.all(
  shards.map(async (s, i) => {
    const child = python(
      [join(here, 'elastic_worker.py'), join(cgroupOf(s.id), 'cgroup.procs'), String(s.dataMiB), values.bursts, values['idle-s'], values['burst-s'], String(i + 1)],
      shardEnv(s.id),
    );
    s.child = child;
    for await (const line of createInterface({ input: child.stdout })) {
      trace(s.id, line);
      const [word, a, b, c, d] = line.split(' ');
      if (word === 'joined') {
        if (shards.every((x) => x.child !== undefined)) void schedule();
      } else if (word === 'ready') {
        s.idleSince = Date.now();
        firstReadyNs ??= BigInt(c);
        void schedule();
      } else if (word === 'wake') {
        s.busy = true;
        s.wakes.push({ burst: Number(a), ms: Number(BigInt(c) - BigInt(b)) / 1e6, wasSuspended: s.ringAt !== undefined });
        s.ringAt = undefined;
        s.wokeNs = BigInt(c);
      } else if (word === 'burst') {
        s.busy = false;
        s.idleSince = Date.now();
        // Its GPU work: from its wake call's return to the end of its burst (the checksum of
        // all its data included).
        s.bursts.push({ ms: Number(BigInt(c) - BigInt(b)) / 1e6, intact: d === '1', fromNs: s.wokeNs ?? BigInt(b), toNs: BigInt(c) });
        void schedule();
      } else if (word === 'done') {
        lastDoneNs = process.hrtime.bigint();
        s.done = true;
        s.state = 'done';
        s.busy = false;
        child.stdin.end();
        void schedule();
      }
    }
    if (!s.done) {
      // Its process ended without finishing (its traceback is on stderr): counted, room freed.
      emit({ check: 'tenant died', shard: s.id, bursts: s.bursts.length });
      s.done = true;
      s.died = true;
      s.state = 'done';
      s.busy = false;
      void schedule();
    }
  }),
);
// From the first tenant holding its data to the last one done: the run's span for the jobs.
const makespanS = Number((lastDoneNs ?? 0n) - (firstReadyNs ?? 0n)) / 1e9;

const wakes = shards.flatMap((s) => s.wakes.map((w) => ({ ...w, dataMiB: s.dataMiB })));
const bursts = shards.flatMap((s) => s.bursts);
const suspends = events.filter((e) => e.direction === 'suspend' && e.ok);
const resumes = events.filter((e) => e.direction === 'resume' && e.ok);
const sizeOf = new Map(shards.map((s) => [s.id, s.dataMiB]));
for (const size of [...new Set(shards.map((s) => s.dataMiB))]) {
  const cold = wakes.filter((w) => w.dataMiB === size && w.wasSuspended);
  const warm = wakes.filter((w) => w.dataMiB === size && !w.wasSuspended).map((w) => w.ms);
  // A first burst's wake may wait behind shards never placed yet (the queue is first come);
  // the later ones are the steady state.
  const later = cold.filter((w) => w.burst > 0).map((w) => w.ms);
  const ms = cold.map((w) => w.ms);
  emit({
    check: 'wake latency',
    dataGiB: round(size / 1024, 2),
    suspendedWakes: ms.length,
    p50ms: round(pct(ms, 50)),
    p99ms: round(pct(ms, 99)),
    laterBurstsP50ms: round(pct(later, 50)),
    laterBurstsP99ms: round(pct(later, 99)),
    residentWakes: warm.length,
    residentP50ms: round(pct(warm, 50), 2),
  });
  for (const direction of ['suspend', 'resume']) {
    const list = events.filter((e) => e.ok && e.direction === direction && sizeOf.get(e.shard) === size);
    const gbps = list.map((e) => e.bytes / 1e9 / e.seconds);
    emit({
      check: `${direction}s`,
      dataGiB: round(size / 1024, 2),
      moves: list.length,
      gibP50: round(pct(list.map((e) => e.bytes / GiB), 50), 2),
      secondsP50: round(pct(list.map((e) => e.seconds), 50), 2),
      secondsMax: round(list.length === 0 ? null : Math.max(...list.map((e) => e.seconds)), 2),
      gbpsP50: round(pct(gbps, 50), 2),
      overheadP50ms: round(pct(list.map((e) => e.overheadMs), 50)),
      overheadMaxMs: round(list.length === 0 ? null : Math.max(...list.map((e) => e.overheadMs))),
    });
  }
}
// The GPU's busy time: the union of the tenants' GPU work (wake returned → burst end).
const intervals = bursts.map((b) => [b.fromNs, b.toNs]).sort((x, y) => (x[0] < y[0] ? -1 : x[0] > y[0] ? 1 : 0));
let busyNs = 0n;
let openFrom;
let openTo;
for (const [from, to] of intervals) {
  if (openTo === undefined || from > openTo) {
    if (openTo !== undefined) busyNs += openTo - openFrom;
    openFrom = from;
    openTo = to;
  } else if (to > openTo) openTo = to;
}
if (openTo !== undefined) busyNs += openTo - openFrom;
const busyS = Number(busyNs) / 1e9;
const workS = bursts.reduce((sum, b) => sum + Number(b.toNs - b.fromNs) / 1e9, 0);
// The same jobs one at a time on the card, back to back, nobody waiting for a move: each one's
// idle times and its bursts, each burst as long as its shortest here (the least shared card).
const oneAtATimeS = shards.reduce((sum, s) => {
  const shortest = Math.min(...s.bursts.map((b) => Number(b.toNs - b.fromNs) / 1e9));
  return sum + Number(values.bursts) * (Number(values['idle-s']) + (Number.isFinite(shortest) ? shortest : 0));
}, 0);
const oneAtATimeWorkS = oneAtATimeS - shardCount * Number(values.bursts) * Number(values['idle-s']);
emit({
  check: 'bursty tenants',
  shards: shardCount,
  wakesServed: wakes.length,
  wakesExpected: shardCount * Number(values.bursts),
  dataIntact: bursts.every((b) => b.intact),
  burstsIntact: bursts.filter((b) => b.intact).length,
  suspends: suspends.length,
  resumes: resumes.length,
  failedMoves: events.filter((e) => !e.ok).length,
  makespanS: round(makespanS),
  oneAtATimeS: round(oneAtATimeS),
  tenantGpuWorkS: round(workS),
  gpuBusyS: round(busyS),
  gpuBusyShare: round(busyS / makespanS, 3),
  oneAtATimeBusyShare: round(oneAtATimeWorkS / oneAtATimeS, 3),
  suspendGBps: round(suspends.reduce((s, e) => s + e.bytes, 0) / 1e9 / suspends.reduce((s, e) => s + e.seconds, 0), 2),
  resumeGBps: round(resumes.reduce((s, e) => s + e.bytes, 0) / 1e9 / resumes.reduce((s, e) => s + e.seconds, 0), 2),
  overheadP50ms: round(pct(events.map((e) => e.overheadMs), 50)),
  overheadP99ms: round(pct(events.map((e) => e.overheadMs), 99)),
  overheadMaxMs: round(events.length === 0 ? null : Math.max(...events.map((e) => e.overheadMs))),
  decideP99ms: round(pct(decideMs, 99), 2),
});
filler.stdin.end();

// ---------------------------------------------------------------------------------------
// 2. The raw API against the agent's move, twin processes of --raw-gib, alternating.

const rawBytes = Number(values['raw-gib']) * GiB;
async function sideBySide() {
  const twin = async (id) => {
    await limits.prepare(id, [{ uuid: gpu.uuid, limitBytes: rawBytes + 2 * GiB }], contextBytes, 'report');
    const child = python([join(here, 'elastic_worker.py'), join(cgroupOf(id), 'cgroup.procs'), String(rawBytes / MiB), '1', '3600', '0', '7'], shardEnv(id));
    const lines = createInterface({ input: child.stdout });
    let pid;
    for await (const line of lines) {
      const [word, a] = line.split(' ');
      if (word === 'joined') {
        pid = Number(a);
        child.stdin.write('go\n');
      }
      if (word === 'ready') break;
    }
    return { id, child, pid };
  };
  const rawRun = (pid, op) =>
    new Promise((done) => {
      const child = python([join(here, 'checkpoint_raw.py'), String(pid), op]);
      let text = '';
      child.stdout.on('data', (d) => (text += d));
      child.on('exit', () => {
        const [, , first, second, result] = text.trim().split(' ');
        done({ ms: Number(first) + Number(second), result });
      });
    });
  const raw = await twin('raw');
  const agent = await twin('agent');
  const side = { raw: { out: [], back: [] }, agent: { out: [], back: [], overhead: [] }, failures: [] };
  for (let r = 0; r < 2; r++) {
    const out = await rawRun(raw.pid, 'suspend');
    const back = await rawRun(raw.pid, 'resume');
    for (const x of [out, back]) if (x.result !== 'CUDA_SUCCESS') side.failures.push(`raw: ${x.result}`);
    side.raw.out.push(out.ms);
    side.raw.back.push(back.ms);
    const t0 = performance.now();
    const s = await move(agent.id, 'suspend');
    const t1 = performance.now();
    const b = await move(agent.id, 'resume', s.bytes);
    const t2 = performance.now();
    for (const x of [s, b]) if (!x.outcome.ok) side.failures.push(`agent: ${x.outcome.reason}`);
    side.agent.out.push(t1 - t0);
    side.agent.back.push(t2 - t1);
    side.agent.overhead.push(t1 - t0 - s.driverMs, t2 - t1 - b.driverMs);
  }
  const mean = (xs) => xs.reduce((a, b) => a + b, 0) / xs.length;
  emit({
    check: 'raw API vs agent',
    gib: Number(values['raw-gib']),
    rawOutMs: side.raw.out.map(round),
    agentOutMs: side.agent.out.map(round),
    rawBackMs: side.raw.back.map(round),
    agentBackMs: side.agent.back.map(round),
    outRatio: round(mean(side.agent.out) / mean(side.raw.out), 3),
    backRatio: round(mean(side.agent.back) / mean(side.raw.back), 3),
    agentOverheadMs: side.agent.overhead.map(round),
    failures: side.failures,
  });
}
if (rawBytes > 0) await sideBySide();
killAll();
await regionWatch.onModuleDestroy?.();
await limits.onModuleDestroy();
backend.close();
for (const s of cgroupsMade) {
  try {
    rmdirSync(join(cgroupRoot, s));
  } catch {
    // a process may still be leaving it
  }
}
rmSync(work, { recursive: true, force: true });
printTable();
process.exit(0);

function printTable(note) {
  console.log(`\n| check | result |\n| --- | --- |${note === undefined ? '' : `\n| ${note} | |`}`);
  for (const row of rows) {
    const { check, ...rest } = row;
    console.log(`| ${check} | ${Object.entries(rest).map(([k, v]) => `${k}=${JSON.stringify(v)}`).join(' ')} |`);
  }
}
