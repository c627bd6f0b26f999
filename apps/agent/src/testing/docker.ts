import { execFileSync, spawnSync } from 'node:child_process';
import {
  chmodSync,
  copyFileSync,
  mkdirSync,
  mkdtempSync,
  realpathSync,
  rmSync,
  writeFileSync,
} from 'node:fs';
import { tmpdir } from 'node:os';
import { dirname, join } from 'node:path';

import { LABELS } from '../containers/labels.js';
import { REPO_ROOT } from './paths.js';

const WORKLOAD_SOURCE = join(REPO_ROOT, 'apps/agent/src/testing/workload.c');

export function docker(...args: string[]): string {
  const result = spawnSync('docker', args, { encoding: 'utf8' });
  if (result.status !== 0)
    throw new Error(`docker ${args.join(' ')} failed: ${result.stderr.trim()}`);
  return result.stdout.trim();
}

/**
 * Imports an image from a local root filesystem (no registry is reachable): the static
 * `workload` program as /workload, its default command `workload sleep`, plus `files`
 * (path in the image → content), e.g. incompressible bytes to make a pull take a while.
 */
export function importWorkloadImage(tag: string, files: Record<string, Buffer> = {}): void {
  const work = mkdtempSync(join(tmpdir(), 'gpushards-image-'));
  try {
    const root = join(work, 'rootfs');
    mkdirSync(join(root, 'tmp'), { recursive: true });
    chmodSync(join(root, 'tmp'), 0o1777);
    execFileSync('cc', ['-O2', '-static', '-o', join(root, 'workload'), WORKLOAD_SOURCE]);
    for (const [path, content] of Object.entries(files)) {
      mkdirSync(dirname(join(root, path)), { recursive: true });
      writeFileSync(join(root, path), content);
    }
    execFileSync(
      'sh',
      [
        '-c',
        `tar -C "${root}" -c . | docker import --change 'CMD ["/workload","sleep"]' - "${tag}"`,
      ],
      {
        stdio: ['ignore', 'ignore', 'pipe'],
      },
    );
  } finally {
    rmSync(work, { recursive: true, force: true });
  }
}

/**
 * Compiles testing/cuda-probe.c into `out`, linked against the fake libcuda.so.1 (run it on the
 * host with LD_LIBRARY_PATH naming the fakes' folder); returns `out`.
 */
export function buildCudaProbe(out: string, fakeCuda: string): string {
  execFileSync('cc', [
    '-O2',
    `-I${join(REPO_ROOT, 'native/vgpu/include')}`,
    '-o',
    out,
    join(REPO_ROOT, 'apps/agent/src/testing/cuda-probe.c'),
    `-L${dirname(fakeCuda)}`,
    '-l:libcuda.so.1',
  ]);
  return out;
}

/**
 * Imports an image holding /cuda-probe (testing/cuda-probe.c, linked against libcuda.so.1)
 * and the glibc files it and libvgpu.so need, but no libcuda: in simulated mode the agent
 * mounts the fake one where a driver would be.
 */
export function importCudaProbeImage(
  tag: string,
  fakeCuda: string,
  interposer: string,
  /** Path in the image → a program on the host (its libraries come along, libcuda excepted). */
  programs: Record<string, string> = {},
): void {
  const work = mkdtempSync(join(tmpdir(), 'gpushards-image-'));
  try {
    const root = join(work, 'rootfs');
    const probe = buildCudaProbe(join(work, 'cuda-probe'), fakeCuda);
    place(root, probe, '/cuda-probe');
    chmodSync(join(root, 'cuda-probe'), 0o755);
    for (const [target, source] of Object.entries(programs)) {
      place(root, source, target);
      chmodSync(join(root, target), 0o755);
    }
    const env = { ...process.env, LD_LIBRARY_PATH: dirname(fakeCuda) };
    for (const binary of [probe, interposer, ...Object.values(programs)]) {
      const ldd = execFileSync('ldd', [binary], { encoding: 'utf8', env });
      for (const [, library = ''] of ldd.matchAll(/(\/\S+\.so[.\d]*)/g)) {
        if (library.endsWith('/libcuda.so.1')) continue;
        place(root, library, library);
        // Also where the loader searches by name (the interpreter is listed by its /lib64
        // path): a library loaded with dlmopen into a namespace of its own finds it there.
        const real = realpathSync(library);
        if (real !== library) place(root, library, real);
      }
    }
    mkdirSync(join(root, 'tmp'), { recursive: true });
    chmodSync(join(root, 'tmp'), 0o1777);
    execFileSync('sh', ['-c', `tar -C "${root}" -c . | docker import - "${tag}"`], {
      stdio: ['ignore', 'ignore', 'pipe'],
    });
  } finally {
    rmSync(work, { recursive: true, force: true });
  }
}

function place(root: string, source: string, target: string): void {
  mkdirSync(dirname(join(root, target)), { recursive: true });
  copyFileSync(source, join(root, target));
}

/** Shard containers of one host, as `docker ps` lists them. */
export function shardContainers(hostId: string): { id: string; shardId: string; state: string }[] {
  const out = docker(
    'ps',
    '-a',
    '--no-trunc',
    '--filter',
    `label=${LABELS.host}=${hostId}`,
    '--format',
    `{{.ID}} {{.Label "${LABELS.shard}"}} {{.State}}`,
  );
  return out === ''
    ? []
    : out.split('\n').map((line) => {
        const [id = '', shardId = '', state = ''] = line.split(' ');
        return { id, shardId, state };
      });
}

/** Removes every container of these test hosts and the images; never throws. */
export function cleanUpDocker(hostIds: readonly string[], images: readonly string[]): void {
  for (const hostId of hostIds) {
    const ids = spawnSync('docker', ['ps', '-aq', '--filter', `label=${LABELS.host}=${hostId}`], {
      encoding: 'utf8',
    })
      .stdout.split('\n')
      .filter((id) => id !== '');
    if (ids.length > 0) spawnSync('docker', ['rm', '-f', ...ids], { stdio: 'ignore' });
  }
  if (images.length > 0) spawnSync('docker', ['rmi', '-f', ...images], { stdio: 'ignore' });
}
