#!/usr/bin/env node
// The agent's own services on several real GPUs (no Docker), as bench/host-fence/h100.mjs runs them:
// GPU discovery (NvmlBackend over the driver's libnvidia-ml through koffi), LimitsService writing
// each shard's limits file, EnforcementService sampling every GPU's processes and writing real
// bytes, the compute ledger read by LedgerActivity. Shards are processes in a real cgroup v2 named
// as Docker names a container's (or a shadow /proc where the cgroup filesystem is read-only).
// Build the agent first; multi_gpu.sh runs this. Prints one JSON line per check (and --out).
//
//   node mg_agent.mjs limits --state DIR --shard ID --caps-gib 8,8
//       a limits file for GPUs 0..n-1 as the agent writes it (context measured); prints its path
//   node mg_agent.mjs fence --lib libvgpu.so          two cards: caps that differ, real bytes per
//       card, a process over its cap on GPU 1 dealt with while GPU 0 is untouched
//   node mg_agent.mjs share --lib libvgpu.so [--secs 6]   compute share 25/75 on two cards at once
//   node mg_agent.mjs mix --lib libvgpu.so            four GPUs: a 4-GPU shard (tensor-parallel
//       serving) beside a 2-GPU (DDP) and two 1-GPU shards (two GPUs: a 2-GPU shard beside two
//       1-GPU shards), every byte attributed per card, each rank told the cap less real bytes
import { spawn } from 'node:child_process';
import {
  appendFileSync,
  existsSync,
  mkdirSync,
  mkdtempSync,
  readFileSync,
  rmSync,
  rmdirSync,
} from 'node:fs';
import { tmpdir } from 'node:os';
import { dirname, join, resolve } from 'node:path';
import { createInterface } from 'node:readline';
import { fileURLToPath } from 'node:url';
import { parseArgs } from 'node:util';

const here = dirname(fileURLToPath(import.meta.url));
const agentDist = process.env.GPUSHARDS_AGENT_DIST ?? resolve(here, '../../apps/agent/dist');
const { values, positionals } = parseArgs({
  allowPositionals: true,
  options: {
    lib: { type: 'string' },
    out: { type: 'string' },
    python: { type: 'string', default: 'python3' },
    interval: { type: 'string', default: '50' },
    secs: { type: 'string', default: '6' },
    state: { type: 'string' },
    shard: { type: 'string' },
    'caps-gib': { type: 'string' },
  },
});
const mode = positionals[0];
const MiB = 2 ** 20;
const GiB = 2 ** 30;
const lib = values.lib && resolve(values.lib);
const intervalMs = Number(values.interval);
const multicastOff = {
  NCCL_NVLS_ENABLE: '0',
  TORCH_SYMM_MEM_DISABLE_MULTICAST: '1',
  NVSHMEM_DISABLE_NVLS: '1',
};

const { Nvml } = await import(join(agentDist, 'gpus/nvml.js'));
const { NvmlBackend } = await import(join(agentDist, 'gpus/gpu-backends.js'));
const { LimitsService } = await import(join(agentDist, 'limits/limits.service.js'));
const { decodeLimits } = await import(join(agentDist, 'limits/limits-file.js'));
const { EnforcementService } = await import(join(agentDist, 'enforcement/enforcement.service.js'));
const { ProcessOwners } = await import(join(agentDist, 'enforcement/process-owners.js'));
const { AgentMetrics } = await import(join(agentDist, 'metrics/agent-metrics.js'));
const { RegionWatchService } = await import(join(agentDist, 'regions/region-watch.service.js'));
const { LedgerActivity, prepareLedgerDir } = await import(
  join(agentDist, 'compute/ledger-activity.js')
);
const { createLogger } = await import(join(agentDist, 'logging/logger.js'));

const failed = [];
function emit(row) {
  const text = JSON.stringify(row);
  console.log(text);
  if (values.out) appendFileSync(values.out, text + '\n');
  if (row.ok === false) failed.push(row.check);
}

const backend = new NvmlBackend(
  Nvml.open(process.env.GPUSHARDS_NVML_LIBRARY ?? 'libnvidia-ml.so.1'),
  process.env.GPUSHARDS_CUDA_LIBRARY ?? 'libcuda.so.1',
);
const gpus = backend.gpus;
const work = mkdtempSync(join(tmpdir(), 'gpushards-mg-'));
const logger = createLogger(process.env.GS_LOG_LEVEL ?? 'silent', 'mg');

// Real cgroups where we may make them (root on a VM), as h100.mjs does; else a shadow /proc.
const cgroupRoot = `/sys/fs/cgroup/gpushards-mg-${process.pid}`;
let realCgroups = false;
try {
  mkdirSync(join(cgroupRoot, 'probe'), { recursive: true });
  // A cgroup v2 folder comes with its control files; a plain folder (a tmpfs there) does not.
  realCgroups = existsSync(join(cgroupRoot, 'probe', 'cgroup.procs'));
  rmdirSync(join(cgroupRoot, 'probe'));
  if (!realCgroups) rmdirSync(cgroupRoot);
} catch {
  realCgroups = false;
}
const procRoot = realCgroups ? '/proc' : join(work, 'proc');
const config = {
  hostId: 'mg',
  stateDir: values.state ?? join(work, 'state'),
  computeTurns: 'gpu',
  enforcement: { intervalMs, toleranceBytes: 160 * MiB, allowedProcesses: [], procRoot },
};
const limits = new LimitsService(config, logger);
const records = [];
const shards = { list: () => records, stop: async () => ({ wasRunning: true }) };
const enforcement = new EnforcementService(
  config,
  // What the fence reads of GpusService, over the backend this script opened: the inventory
  // (memory of no shard per GPU), the listing (`fresh`: GPUs a pressure ring asks to list
  // afresh) and the lookups a pressure ring needs.
  {
    inventory: { gpus: backend.gpus },
    processes: (watch, fresh) => backend.processes(watch, fresh),
    hostIndex: (uuid) => backend.gpus.find((gpu) => gpu.uuid === uuid)?.index,
    canonicalUuid: (uuid) =>
      backend.gpus.find((gpu) => gpu.uuid.toLowerCase() === uuid.toLowerCase())?.uuid ?? uuid,
  },
  shards,
  limits,
  new ProcessOwners(procRoot),
  new AgentMetrics(),
  new RegionWatchService(config, logger),
  logger,
);
const violations = [];
enforcement.onViolations((done) => violations.push(...done));

const containerOf = (shardId) =>
  Buffer.from(`mg-${shardId}`.padEnd(32, '0')).toString('hex').slice(0, 64);
const made = [];
function joinTarget(shardId) {
  if (!realCgroups) return procRoot;
  const dir = join(cgroupRoot, `docker-${containerOf(shardId)}.scope`);
  mkdirSync(dir, { recursive: true });
  made.push(dir);
  return join(dir, 'cgroup.procs');
}

let contextBytes;
/** A shard on `caps` ([gpu, bytes] pairs): its record, limits file, region path and how to join. */
async function addShard(shardId, caps, policy, compute) {
  contextBytes ??= backend.measureContextBytes();
  records.push({
    shardId,
    teamId: 'mg',
    containerId: containerOf(shardId),
    state: 'RUNNING',
    gpuUuids: caps.map(([gpu]) => gpu.uuid),
  });
  const file = await limits.prepare(
    shardId,
    caps.map(([gpu, limitBytes]) => ({ uuid: gpu.uuid, limitBytes })),
    contextBytes,
    policy,
    compute,
  );
  return {
    shardId,
    file,
    region: join(work, `region-${shardId}`),
    env: {
      GPUSHARDS_LIMITS_PATH: file,
      GPUSHARDS_REGION_PATH: join(work, `region-${shardId}`),
      GS_JOIN: joinTarget(shardId),
      GS_CONTAINER: containerOf(shardId),
    },
  };
}

const realOf = (shard) =>
  new Map(decodeLimits(readFileSync(shard.file)).map((d) => [d.uuid, d.realBytes ?? 0]));
const mib = (bytes) => Math.round((bytes / MiB) * 10) / 10;
const alive = (pid) => {
  try {
    process.kill(pid, 0);
    return true;
  } catch {
    return false;
  }
};

/** Polls `condition` (the sampler runs on its own timer) until it holds or `seconds` pass. */
async function until(condition, what, seconds = 20) {
  const deadline = Date.now() + seconds * 1000;
  for (;;) {
    const value = condition();
    if (value) return value;
    if (Date.now() > deadline) throw new Error(`timed out waiting for ${what}`);
    await new Promise((r) => setTimeout(r, 20));
  }
}

const children = new Set();
/** A child whose stdout is JSON lines; next() resolves to the next one. */
function jsonChild(args, env) {
  const child = spawn(values.python, args, {
    env: { ...process.env, ...multicastOff, PYTHONUNBUFFERED: '1', ...env },
    stdio: ['pipe', 'pipe', 'pipe'],
  });
  children.add(child);
  let stderr = '';
  child.stderr.on('data', (d) => (stderr = (stderr + d).slice(-4000)));
  const lines = createInterface({ input: child.stdout })[Symbol.asyncIterator]();
  const exited = new Promise((r) => child.on('exit', (code, signal) => r({ code, signal })));
  exited.then(() => children.delete(child));
  return {
    child,
    exited,
    async next() {
      const { value, done } = await lines.next();
      if (done) throw new Error(`${args.join(' ')} ended: ${stderr}`);
      return JSON.parse(value);
    },
    async ask(line) {
      child.stdin.write(line + '\n');
      return this.next();
    },
  };
}

function holder(shard, ordinal, visible, interposed = true) {
  return jsonChild([join(here, 'mg_holder.py'), String(ordinal)], {
    ...shard.env,
    CUDA_VISIBLE_DEVICES: visible,
    ...(interposed ? { LD_PRELOAD: lib } : { LD_PRELOAD: '' }),
  });
}

// ---- limits: a file for mg_pair.py -------------------------------------------------------------

async function limitsFile() {
  const caps = values['caps-gib'].split(',').map((g, i) => [gpus[i], Number(g) * GiB]);
  const shard = await addShard(values.shard, caps, 'report');
  console.log(
    JSON.stringify({ file: shard.file, contextBytes, gpus: caps.map(([g]) => g.uuid) }),
  );
}

// ---- fence: two cards -----------------------------------------------------------------------------

async function fence() {
  const [g0, g1] = gpus;
  const cap0 = 4 * GiB;
  const cap1 = 8 * GiB;
  const shard = await addShard(
    'fence',
    [
      [g0, cap0],
      [g1, cap1],
    ],
    'kill',
  );
  const visible = `${g0.index},${g1.index}`;
  enforcement.start();
  const p0 = holder(shard, 0, visible);
  const p1 = holder(shard, 1, visible);
  const hidden = holder(shard, 1, visible, false); // the same shard, past libvgpu.so
  const [r0, r1, rh] = [await p0.next(), await p1.next(), await hidden.next()];
  const row = {
    check: 'agent fence, two cards',
    capsMiB: { [g0.uuid]: mib(cap0), [g1.uuid]: mib(cap1) },
    contextMiB: mib(contextBytes),
    uuidsSeen: [r0.uuid, r1.uuid, rh.uuid],
  };
  const problems = [];
  const expect = (ok, what) => ok || problems.push(what);
  expect((await p0.ask(`alloc ${2 * GiB}`)).ok, 'P0 could not take 2 GiB on GPU 0');
  expect((await p1.ask(`alloc ${2 * GiB}`)).ok, 'P1 could not take 2 GiB on GPU 1');
  expect((await hidden.ask(`alloc ${3 * GiB}`)).ok, 'the hidden process could not take 3 GiB');
  // Real bytes per card: GPU 1 holds P1 and the hidden process, GPU 0 only P0.
  const real = await until(() => {
    const r = realOf(shard);
    return r.get(g0.uuid) >= 2 * GiB && r.get(g1.uuid) >= 5 * GiB && r;
  }, 'real bytes on both cards');
  row.realMiB = { [g0.uuid]: mib(real.get(g0.uuid)), [g1.uuid]: mib(real.get(g1.uuid)) };
  const info0 = await p0.ask('info');
  const info1 = await p1.ask('info');
  row.toldMiB = {
    P0: { free: mib(info0.free), total: mib(info0.total) },
    P1: { free: mib(info1.free), total: mib(info1.total) },
  };
  expect(info0.total === cap0 && info1.total === cap1, 'each card reports its own cap');
  // By its own count P1 holds context + 2 GiB of 8: 3 GiB more would fit; the hidden 3 GiB
  // (and its context) in real_bytes leave less than that.
  const more1 = await p1.ask(`alloc ${3 * GiB}`);
  row.p1ThreeGiBMore = more1;
  expect(!more1.ok && more1.code === 2, 'P1 was not refused 3 GiB on GPU 1 against real bytes');
  const more0 = await p0.ask(`alloc ${1 * GiB}`);
  row.p0OneGiBMore = more0;
  expect(more0.ok, 'P0 was refused 1 GiB on GPU 0, which had room');
  // Over cap + tolerance on GPU 1 only: the hidden process takes 2.5 GiB more.
  const before = violations.length;
  const crossing = performance.now();
  expect((await hidden.ask(`alloc ${2.5 * GiB}`)).ok, 'the hidden process could not take 2.5 GiB more');
  const ended = await Promise.race([
    hidden.exited,
    new Promise((r) => setTimeout(() => r(undefined), 20000)),
  ]);
  row.killMs = Math.round(performance.now() - crossing);
  const acted = violations.slice(before);
  row.violations = acted.map((v) => ({
    gpu: v.gpuUuid,
    realMiB: mib(v.realBytes),
    capMiB: mib(v.capBytes),
    action: v.action,
    killed: v.killedPids,
  }));
  expect(ended?.signal === 'SIGKILL', `the hidden process ended ${JSON.stringify(ended)}`);
  expect(
    acted.length > 0 && acted.every((v) => v.gpuUuid === g1.uuid),
    'violations on another card than GPU 1',
  );
  expect(
    acted.flatMap((v) => v.killedPids).every((pid) => pid === hidden.child.pid),
    'killed another process than the hidden one',
  );
  expect(alive(p0.child.pid) && alive(p1.child.pid), 'P0 or P1 did not survive');
  const after = await until(() => {
    const r = realOf(shard);
    return r.get(g1.uuid) < 4 * GiB && r;
  }, 'GPU 1 back under its cap');
  row.realAfterMiB = { [g0.uuid]: mib(after.get(g0.uuid)), [g1.uuid]: mib(after.get(g1.uuid)) };
  expect(after.get(g0.uuid) >= 3 * GiB, 'GPU 0 lost memory: P0 was touched');
  const p0Again = await p0.ask('info');
  row.p0AfterMiB = { free: mib(p0Again.free), total: mib(p0Again.total) };
  row.problems = problems;
  row.ok = problems.length === 0;
  for (const c of [p0, p1]) c.child.stdin.end();
  await Promise.all([p0.exited, p1.exited]);
  emit(row);
}

// ---- share: 25/75 on two cards at once -------------------------------------------------------------

const WORKER = `import sys; sys.path.insert(0, ${JSON.stringify(here)}); from compute_bench import WORKER; exec(compile(WORKER, "worker", "exec"))`;

/** compute_bench.py's workers, started together; resolves to their JSON results. */
async function together(workers, secs, during) {
  const started = workers.map((w) => jsonOrReady(w));
  await Promise.all(started.map((s) => s.ready));
  const t0 = Date.now() / 1000 + 0.5;
  for (const s of started) s.child.stdin.write(`${t0}\n`);
  const watched = during?.(t0);
  const results = await Promise.all(started.map((s) => s.result));
  return { results, watched: await watched };
  function jsonOrReady(w) {
    const child = spawn(values.python, ['-c', WORKER, w.kind, String(secs)], {
      env: { ...process.env, ...multicastOff, PYTHONUNBUFFERED: '1', ...w.env },
      stdio: ['pipe', 'pipe', 'pipe'],
    });
    children.add(child);
    let stderr = '';
    child.stderr.on('data', (d) => (stderr = (stderr + d).slice(-3000)));
    const lines = createInterface({ input: child.stdout })[Symbol.asyncIterator]();
    const next = async () => {
      const { value, done } = await lines.next();
      if (done) throw new Error(`worker ${w.tag} ended: ${stderr}`);
      return value;
    };
    const ready = next().then((l) => {
      if (l.trim() !== 'ready') throw new Error(`worker ${w.tag}: ${l} ${stderr}`);
    });
    const result = ready.then(async () => {
      const r = JSON.parse(await next());
      children.delete(child);
      return { tag: w.tag, ...r };
    });
    return { child, ready, result };
  }
}

async function share() {
  const secs = Number(values.secs);
  const [g0, g1] = gpus;
  const solo = await together(
    [g0, g1].map((g) => ({ tag: `solo-${g.index}`, kind: 'mm', env: { CUDA_VISIBLE_DEVICES: String(g.index), LD_PRELOAD: '' } })),
    secs,
  );
  const soloRate = new Map(solo.results.map((r, i) => [[g0, g1][i].uuid, r.rate]));
  const ledger = join(work, 'ledger');
  await prepareLedgerDir(ledger);
  const shares = { c25: 250, c75: 750 };
  const workers = [];
  for (const [id, permille] of Object.entries(shares)) {
    const shard = await addShard(
      id,
      [
        [g0, 20 * GiB],
        [g1, 20 * GiB],
      ],
      'report',
      { sharePermille: permille, mode: 'guaranteed' },
    );
    for (const g of [g0, g1]) {
      workers.push({
        tag: `${id}@${g.index}`,
        shardId: id,
        gpu: g.uuid,
        kind: 'mm',
        env: {
          ...shard.env,
          LD_PRELOAD: lib,
          GPUSHARDS_LEDGER_DIR: ledger,
          CUDA_VISIBLE_DEVICES: String(g.index),
        },
      });
    }
  }
  enforcement.start();
  const activity = new LedgerActivity(ledger);
  const ran = await together(workers, secs, async (t0) => {
    // The agent's view of the same run: busy ratio per shard per card over the steady window.
    await new Promise((r) => setTimeout(r, (t0 + 1) * 1000 - Date.now()));
    await activity.sample();
    await new Promise((r) => setTimeout(r, (t0 + secs - 0.5) * 1000 - Date.now()));
    return activity.sample();
  });
  const rows = ran.results.map((r, i) => {
    const w = workers[i];
    const target = shares[w.shardId] / 10;
    const got = (100 * r.rate) / soloRate.get(w.gpu);
    const busy = ran.watched.get(w.shardId)?.find((a) => a.gpuUuid === w.gpu.toLowerCase());
    return {
      worker: w.tag,
      targetPercent: target,
      percentOfSolo: Math.round(got * 10) / 10,
      ledgerBusyPercent: busy?.busyRatio === undefined ? null : Math.round(busy.busyRatio * 1000) / 10,
      within5pp: Math.abs(got - target) <= 5,
    };
  });
  emit({
    check: 'compute share 25/75 on two cards at once',
    soloRate: Object.fromEntries(soloRate),
    secs,
    rows,
    ok: rows.every((r) => r.within5pp),
  });
}

// ---- mix: 4 + 2 + 1 + 1 on four GPUs -------------------------------------------------------------

async function mix() {
  // Four GPUs: a 4-GPU shard beside a 2-GPU and two 1-GPU shards; two: a 2-GPU shard beside two
  // 1-GPU shards.
  const plan =
    gpus.length >= 4
      ? [
          { id: 'four', devices: [0, 1, 2, 3], capGiB: 12, workload: 'tp' },
          { id: 'two', devices: [2, 3], capGiB: 6, workload: 'ddp' },
          { id: 'one-a', devices: [0], capGiB: 5, workload: 'tp' },
          { id: 'one-b', devices: [1], capGiB: 5, workload: 'ddp' },
        ]
      : [
          { id: 'two', devices: [0, 1], capGiB: 8, workload: 'tp' },
          { id: 'one-a', devices: [0], capGiB: 5, workload: 'ddp' },
          { id: 'one-b', devices: [1], capGiB: 5, workload: 'tp' },
        ];
  const check = `mix ${plan.map((p) => p.devices.length).join('+')} through the agent`;
  enforcement.start();
  const running = [];
  for (const p of plan) {
    const shard = await addShard(
      p.id,
      p.devices.map((d) => [gpus[d], p.capGiB * GiB]),
      'report',
    );
    const child = jsonChild(
      [
        join(here, 'mg_pair.py'),
        'shard',
        lib,
        '--workload',
        p.workload,
        '--devices',
        p.devices.join(','),
        '--limits',
        shard.file,
        '--region',
        shard.region,
        '--join',
        shard.env.GS_JOIN,
        '--container',
        shard.env.GS_CONTAINER,
        '--rounds',
        '2',
        '--name',
        p.id,
      ],
      {},
    );
    running.push({ ...p, shard, child });
  }
  const problems = [];
  const shardsOut = {};
  for (const r of running) {
    const ready = await r.child.next();
    if (ready.event !== 'ready') throw new Error(`${r.id}: ${JSON.stringify(ready).slice(0, 3000)}`);
    const ran = await r.child.next();
    if (ran.event !== 'ran') throw new Error(`${r.id}: ${JSON.stringify(ran).slice(0, 3000)}`);
    r.pids = ready.pids;
    shardsOut[r.id] = { devices: r.devices, workload: r.workload, capGiB: r.capGiB, ready: ready.ready, ran: ran.rounds };
    const last = ran.rounds.at(-1);
    if (r.workload === 'ddp' && new Set(last.map((x) => x.params_hash)).size !== 1)
      problems.push(`${r.id}: ranks disagree`);
    if (r.workload === 'tp' && !ready.ready.every((x) => x.graph_equals_eager))
      problems.push(`${r.id}: graph replay differs from eager (${ready.ready.map((x) => x.graph_error)})`);
  }
  // Every shard holding its memory: the agent's attribution per card against NVML and the regions.
  const want = (r, gpu) => r.devices.includes(gpu.index);
  const usage = await until(() => {
    const u = enforcement.realUsage();
    return (
      u &&
      running.every((r) => gpus.every((g) => want(r, g) === (u.shards.get(r.id)?.get(g.uuid) ?? 0) > 0)) &&
      u
    );
  }, 'every shard seen on exactly its cards');
  const listed = backend.processes(new Set(running.flatMap((r) => r.pids)));
  const perCard = {};
  for (const r of running) {
    const region = await regionOf(r.shard.region);
    perCard[r.id] = {};
    for (const g of gpus) {
      const agent = usage.shards.get(r.id)?.get(g.uuid) ?? 0;
      const nvml = listed
        .filter((p) => p.gpuUuid === g.uuid && r.pids.includes(p.pid))
        .reduce((s, p) => s + p.bytes, 0);
      const entry = region.devices.find((d) => d.uuid.toLowerCase() === g.uuid.toLowerCase());
      perCard[r.id][g.index] = {
        agentRealMiB: mib(agent),
        nvmlOfItsPidsMiB: mib(nvml),
        regionUsedMiB: entry ? mib(entry.usedBytes) : null,
        capMiB: want(r, g) ? r.capGiB * 1024 : null,
      };
      if (want(r, g) !== agent > 0) problems.push(`${r.id} on GPU ${g.index}: agent sees ${agent}`);
      if (Math.abs(agent - nvml) > 64 * MiB)
        problems.push(`${r.id} on GPU ${g.index}: agent ${agent} but its pids hold ${nvml}`);
      if (want(r, g) && agent > r.capGiB * GiB + 160 * MiB) problems.push(`${r.id} on GPU ${g.index}: over its cap`);
    }
  }
  // What each rank is told once the agent's real bytes are in its limits file: the cap less the
  // larger of what libvgpu.so charged and what the card really holds for the shard.
  const told = {};
  for (const r of running) r.child.child.stdin.write('told\n');
  for (const r of running) {
    const answers = (await r.child.next()).told;
    const real = realOf(r.shard);
    const region = await regionOf(r.shard.region);
    told[r.id] = r.devices.map((d, rank) => {
      const g = gpus[d];
      const used = region.devices.find((x) => x.uuid.toLowerCase() === g.uuid.toLowerCase())?.usedBytes ?? 0;
      const expected = r.capGiB * GiB - Math.max(used, real.get(g.uuid) ?? 0);
      const got = answers[rank].free_mib * MiB;
      if (Math.abs(got - expected) > 64 * MiB)
        problems.push(`${r.id} rank ${rank} on GPU ${d}: told ${mib(got)} MiB free, expected ${mib(expected)}`);
      return {
        gpu: d,
        toldFreeMiB: answers[rank].free_mib,
        toldTotalMiB: answers[rank].total_mib,
        chargedMiB: mib(used),
        realMiB: mib(real.get(g.uuid) ?? 0),
        expectedFreeMiB: mib(expected),
      };
    });
  }
  for (const r of running) r.child.child.stdin.write('check\n');
  for (const r of running) {
    const checked = await r.child.next();
    shardsOut[r.id].refusedPastCap = checked.refused_past_cap;
    if (!checked.refused_past_cap.every(Boolean)) problems.push(`${r.id}: a rank was not refused past its cap`);
  }
  for (const r of running) r.child.child.stdin.write('quit\n');
  await Promise.all(running.map((r) => r.child.exited));
  if (violations.length) problems.push(`violations: ${JSON.stringify(violations)}`);
  emit({ check, perCard, told, shards: shardsOut, problems, ok: problems.length === 0 });
}

/** A region as the agent reads it (gpushards-region show). */
async function regionOf(path) {
  const text = await new Promise((res, rej) => {
    const c = spawn(process.env.GS_REGION_TOOL ?? 'gpushards-region', ['show', path]);
    let out = '';
    c.stdout.on('data', (d) => (out += d));
    c.on('exit', (code) => (code === 0 ? res(out) : rej(new Error(`region show ${code}`))));
  });
  return JSON.parse(text);
}

// ---- main ----------------------------------------------------------------------------------------

try {
  if (mode === 'limits') await limitsFile();
  else {
    emit({
      check: 'agent discovery',
      driver: backend.driverVersion,
      cuda: backend.cudaVersion,
      gpus: gpus.map((g) => ({ index: g.index, uuid: g.uuid, model: g.model, totalMiB: mib(g.totalBytes) })),
      contextMiB: mib((contextBytes ??= backend.measureContextBytes())),
      cgroups: realCgroups ? 'real cgroup v2' : 'shadow /proc',
      ok: gpus.length >= 2,
    });
    const run = { fence, share, mix }[mode];
    if (run === undefined) throw new Error(`unknown mode ${mode}`);
    await run().catch((error) => emit({ check: mode, ok: false, problems: [String(error?.stack ?? error)] }));
  }
} finally {
  for (const child of children) child.kill('SIGKILL');
  await enforcement.onModuleDestroy();
  await limits.onModuleDestroy();
  backend.close();
  for (const dir of made.reverse()) {
    try {
      rmdirSync(dir);
    } catch {
      // a process still leaving it: the VM goes back anyway
    }
  }
  try {
    rmdirSync(cgroupRoot);
  } catch {
    // likewise
  }
  if (mode !== 'limits') rmSync(work, { recursive: true, force: true });
}
process.exit(failed.length ? 1 : 0);
