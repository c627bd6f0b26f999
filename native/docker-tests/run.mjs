#!/usr/bin/env node
// The interposer's cap checks inside a real Docker container, the way the agent runs shards:
// libvgpu.so bind-mounted read-only and named in a read-only /etc/ld.so.preload, LD_PRELOAD
// unset. The image is built from a local root filesystem (no registry is reachable): the probe
// program, the fake libcuda.so.1 and the few glibc files they need.
//   node native/docker-tests/run.mjs <native build dir>
// Prints one line per check and `N passed, N failed`.
import { execFileSync, spawnSync } from 'node:child_process';
import {
  chmodSync,
  copyFileSync,
  mkdirSync,
  mkdtempSync,
  readdirSync,
  readFileSync,
  rmSync,
  statSync,
  writeFileSync,
} from 'node:fs';
import { tmpdir } from 'node:os';
import { basename, dirname, join, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';

const here = dirname(fileURLToPath(import.meta.url));
const buildDir = resolve(process.argv[2] ?? join(here, '..', 'build'));
const image = 'gpushards-test/probe:local';
const MiB = 1024 * 1024;
const GiB = 1024 * MiB;
const cap = GiB;
// The fake driver's context costs 300 MiB; the agent writes the measured figure for the interposer.
const contextBytes = 300 * MiB;
const fakeGpus = process.env.DOCKER_TEST_FAKE_GPUS ?? 'NVIDIA H100 80GB HBM3:80g';
const work = mkdtempSync(join(tmpdir(), 'gpushards-docker-'));
const containers = [];
const results = [];

function findFile(dir, name) {
  for (const entry of readdirSync(dir)) {
    const path = join(dir, entry);
    if (entry === name && statSync(path).isFile()) return path;
    if (statSync(path).isDirectory()) {
      const found = findFile(path, name);
      if (found) return found;
    }
  }
  return undefined;
}

function must(path, what) {
  if (!path)
    throw new Error(
      `${what} not found under ${buildDir}: build native/ first (native/run-tests.sh)`,
    );
  return path;
}

const docker = (...args) => execFileSync('docker', args, { encoding: 'utf8' }).trim();

/** Shared libraries a binary needs, as the host's loader resolves them. */
function libraryDependencies(binary, env = {}) {
  const out = execFileSync('ldd', [binary], { encoding: 'utf8', env: { ...process.env, ...env } });
  return [...out.matchAll(/(\/\S+\.so[.\d]*)/g)].map((m) => m[1]);
}

function buildImage(probe, fakeCuda, interposer) {
  const root = join(work, 'rootfs');
  const place = (source, target) => {
    mkdirSync(dirname(join(root, target)), { recursive: true });
    copyFileSync(source, join(root, target));
  };
  place(probe, '/probe');
  chmodSync(join(root, 'probe'), 0o755);
  place(fakeCuda, '/usr/lib/x86_64-linux-gnu/libcuda.so.1');
  const libraryPath = { LD_LIBRARY_PATH: dirname(fakeCuda) };
  const needed = new Set([
    ...libraryDependencies(probe, libraryPath),
    ...libraryDependencies(interposer, libraryPath),
  ]);
  for (const library of needed) {
    if (basename(library) === 'libcuda.so.1') continue;
    place(library, library);
  }
  mkdirSync(join(root, 'tmp'), { recursive: true });
  chmodSync(join(root, 'tmp'), 0o1777);
  execFileSync('sh', ['-c', `tar -C "${root}" -c . | docker import - ${image}`], {
    stdio: 'ignore',
  });
}

function runContainer(name, args, { interposed = true, env = {}, volumes = [] } = {}) {
  const regionDir = join(work, `region-${name}`);
  mkdirSync(regionDir, { recursive: true });
  const flags = ['run', '-d', '--name', name, '--security-opt', 'no-new-privileges'];
  if (interposed) {
    flags.push('-v', `${interposerPath}:/usr/lib/gpushards/libvgpu.so:ro`);
    flags.push('-v', `${preloadFile}:/etc/ld.so.preload:ro`);
  }
  flags.push('-v', `${regionDir}:/run/gpushards`);
  for (const volume of volumes) flags.push('-v', volume);
  const allEnv = {
    CUDA_DEVICE_MEMORY_LIMIT: String(cap),
    GPUSHARDS_REGION_PATH: '/run/gpushards/region',
    GPUSHARDS_FAKE_GPUS: fakeGpus,
    GPUSHARDS_CONTEXT_BYTES: String(contextBytes),
    ...env,
  };
  for (const [key, value] of Object.entries(allEnv)) flags.push('-e', `${key}=${value}`);
  containers.push(name);
  return docker(...flags, image, '/probe', ...args);
}

function waitForJson(name) {
  for (let i = 0; i < 100; i++) {
    const logs = spawnSync('docker', ['logs', name], { encoding: 'utf8' }).stdout;
    const line = logs.split('\n').find((l) => l.startsWith('{'));
    if (line) return JSON.parse(line);
    spawnSync('sleep', ['0.1']);
  }
  throw new Error(
    `container ${name} printed nothing: ${spawnSync('docker', ['logs', name], { encoding: 'utf8' }).stderr}`,
  );
}

function execJson(name, args) {
  const out = docker('exec', name, '/probe', ...args);
  return JSON.parse(out.split('\n').find((l) => l.startsWith('{')));
}

function check(name, fn) {
  try {
    const detail = fn();
    results.push({ name, ok: true });
    console.log(`PASS ${name}${detail ? ` (${detail})` : ''}`);
  } catch (error) {
    results.push({ name, ok: false });
    console.log(`FAIL ${name}: ${error.message}`);
  }
}

function expect(condition, message) {
  if (!condition) throw new Error(message);
}

const interposerPath = must(findFile(buildDir, 'libvgpu.so'), 'libvgpu.so');
const fakeCudaPath = must(findFile(buildDir, 'libcuda.so.1'), 'the fake libcuda.so.1');
const preloadFile = join(work, 'ld.so.preload');
writeFileSync(preloadFile, '/usr/lib/gpushards/libvgpu.so\n');
const probePath = join(work, 'probe');
execFileSync('gcc', [
  '-O2',
  '-o',
  probePath,
  join(here, 'probe.c'),
  `-I${join(here, '..', 'vgpu', 'include')}`,
  `-L${dirname(fakeCudaPath)}`,
  '-l:libcuda.so.1',
]);

try {
  buildImage(probePath, fakeCudaPath, interposerPath);
  const prefix = `gpushards-test-${process.pid}`;

  check('the shard sees its cap with LD_PRELOAD unset (ld.so.preload only)', () => {
    runContainer(`${prefix}-info`, ['info']);
    const info = waitForJson(`${prefix}-info`);
    expect(info.ld_preload_set === false, 'LD_PRELOAD was set inside the container');
    expect(info.total === cap, `total ${info.total} != cap ${cap}`);
    return `total ${info.total / MiB} MiB`;
  });

  check('filling the shard stops at the cap with CUDA_ERROR_OUT_OF_MEMORY', () => {
    runContainer(`${prefix}-fill`, ['fill']);
    const fill = waitForJson(`${prefix}-fill`);
    expect(fill.refusal === 2, `refusal code ${fill.refusal}, wanted 2 (CUDA_ERROR_OUT_OF_MEMORY)`);
    expect(fill.reached + contextBytes <= cap, `reached ${fill.reached} + context past the cap`);
    expect(
      fill.free_before === cap - contextBytes,
      `free ${fill.free_before}, wanted cap - context`,
    );
    expect(
      fill.reached > fill.free_before - 64 * MiB,
      `reached ${fill.reached}, free was ${fill.free_before}`,
    );
    return `reached ${fill.reached / MiB} MiB of ${cap / MiB} MiB, context charged ${contextBytes / MiB} MiB`;
  });

  check('a second process started inside the container shares the budget', () => {
    const held = 256 * MiB;
    runContainer(`${prefix}-shared`, ['hold', String(held)]);
    const first = waitForJson(`${prefix}-shared`);
    expect(first.result === 0, `the first process could not allocate: ${first.result}`);
    const second = execJson(`${prefix}-shared`, ['fill']);
    expect(second.refusal === 2, `refusal code ${second.refusal}`);
    const together = second.reached + held + 2 * contextBytes;
    expect(together <= cap, `together ${together / MiB} MiB past the cap`);
    expect(second.reached > 0, 'the second process got nothing');
    expect(
      second.free_before === cap - held - 2 * contextBytes,
      `second saw ${second.free_before / MiB} MiB free`,
    );
    return `first holds ${held / MiB} MiB, second reached ${second.reached / MiB} MiB`;
  });

  check('two shards in two containers take turns on one GPU ledger (compute share)', () => {
    // The agent's ledger folder, shared read-write by every shard of the host (docs/compute.md).
    const ledgerDir = join(work, 'ledger');
    mkdirSync(ledgerDir, { recursive: true });
    chmodSync(ledgerDir, 0o777);
    const shards = [
      ['a', 25],
      ['b', 75],
    ];
    for (const [shard, share] of shards) {
      runContainer(`${prefix}-compute-${shard}`, ['launch', '3000'], {
        volumes: [`${ledgerDir}:/run/gpushards/ledger`],
        env: {
          GPUSHARDS_SHARD_ID: `shard-${shard}`,
          GPUSHARDS_COMPUTE_SHARE: String(share),
          GPUSHARDS_COMPUTE_SLICE_US: '200',
        },
      });
    }
    for (const [shard] of shards) {
      const out = waitForJson(`${prefix}-compute-${shard}`);
      expect(out.launched === 3000 && out.result === 0, `shard ${shard}: ${JSON.stringify(out)}`);
    }
    const files = readdirSync(ledgerDir).filter((f) => f.startsWith('GPU-') && !f.includes('.tmp'));
    expect(files.length === 1, `ledger files: ${files.join(', ')}`);
    const ledger = readFileSync(join(ledgerDir, files[0]));
    expect(ledger.readBigUInt64LE(0) === 0x31524744454c5047n, 'bad ledger magic');
    const members = {};
    for (let i = 0; i < 32; i++) {
      const base = 128 + i * 128;
      const name = ledger
        .subarray(base, base + 48)
        .toString('latin1')
        .replace(/\0.*$/s, '');
      if (name)
        members[name] = {
          share: ledger.readUInt32LE(base + 48),
          busy: ledger.readBigUInt64LE(base + 64),
        };
    }
    expect(
      members['shard-a']?.share === 250 && members['shard-b']?.share === 750,
      JSON.stringify(members, (k, v) => (typeof v === 'bigint' ? String(v) : v)),
    );
    expect(
      members['shard-a'].busy > 0n && members['shard-b'].busy > 0n,
      'a shard was never charged GPU time',
    );
    return `members ${Object.keys(members).join(', ')}, busy ${members['shard-a'].busy} / ${members['shard-b'].busy} ns`;
  });

  check('the interposer and preload file are mounted read-only', () => {
    const mounts = JSON.parse(docker('inspect', '--format', '{{json .Mounts}}', `${prefix}-info`));
    for (const target of ['/usr/lib/gpushards/libvgpu.so', '/etc/ld.so.preload']) {
      const mount = mounts.find((m) => m.Destination === target);
      expect(mount && mount.RW === false, `${target} is not a read-only mount`);
    }
  });

  check('without the interposer the same probe passes the cap (the check can fail)', () => {
    runContainer(`${prefix}-bare`, ['fill'], { interposed: false });
    const bare = waitForJson(`${prefix}-bare`);
    expect(bare.reached > cap, `reached only ${bare.reached / MiB} MiB uncapped`);
    return `uncapped reached ${bare.reached / GiB} GiB`;
  });
} finally {
  for (const name of containers) spawnSync('docker', ['rm', '-f', name], { stdio: 'ignore' });
  spawnSync('docker', ['rmi', '-f', image], { stdio: 'ignore' });
  rmSync(work, { recursive: true, force: true });
}

const failed = results.filter((r) => !r.ok).length;
console.log(`${results.length - failed} passed, ${failed} failed`);
process.exit(failed === 0 && results.length > 0 ? 0 : 1);
