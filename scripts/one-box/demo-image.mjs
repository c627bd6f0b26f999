#!/usr/bin/env node
// `npm run demo-image [-- --tag NAME]`: builds a small local image for trying shards, with no
// registry: a root filesystem holding demo-probe (demo-probe.c: prints what CUDA reports, fills
// GPU memory until refused, holds it) and the glibc files it and libvgpu.so need, imported
// with `docker import`. No libcuda inside: the host provides it at run time (the NVIDIA
// container runtime, or the agent's fake driver in simulated mode).
import { execFileSync } from 'node:child_process';
import { chmodSync, copyFileSync, existsSync, mkdirSync, mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { dirname, join } from 'node:path';
import { parseArgs } from 'node:util';

import { ensureNativeBuilt, FAKE_DRIVER_DIR, INTERPOSER_PATH } from './build.mjs';
import { REPO_ROOT } from './paths.mjs';

const DEMO_IMAGE = 'gpushards/demo-probe:local';

/** Shared libraries a program needs, as this host's loader resolves them. */
function libraryDependencies(binary) {
  const out = execFileSync('ldd', [binary], {
    encoding: 'utf8',
    env: { ...process.env, LD_LIBRARY_PATH: FAKE_DRIVER_DIR },
  });
  return [...out.matchAll(/(\/\S+\.so[.\d]*)/g)].map((match) => match[1]);
}

function place(root, source, target) {
  mkdirSync(dirname(join(root, target)), { recursive: true });
  copyFileSync(source, join(root, target));
}

/** Builds the demo image under `tag`. */
async function buildDemoImage(tag) {
  await ensureNativeBuilt({ say: console.log });
  const work = mkdtempSync(join(tmpdir(), 'gpushards-demo-image-'));
  try {
    const root = join(work, 'rootfs');
    const probe = join(work, 'demo-probe');
    // Linked against the fake libcuda.so.1 only for its symbols' names: the real driver
    // exports the same ones.
    execFileSync('cc', [
      '-O2',
      `-I${join(REPO_ROOT, 'native/vgpu/include')}`,
      '-o',
      probe,
      join(REPO_ROOT, 'scripts/one-box/demo-probe.c'),
      `-L${FAKE_DRIVER_DIR}`,
      '-l:libcuda.so.1',
    ]);
    place(root, probe, '/demo-probe');
    chmodSync(join(root, 'demo-probe'), 0o755);
    const needed = new Set(
      [probe, INTERPOSER_PATH, join(FAKE_DRIVER_DIR, 'libnvidia-ml.so.1')].flatMap(
        libraryDependencies,
      ),
    );
    // A real libcuda.so.1 also needs these; the NVIDIA runtime mounts the driver, not glibc.
    for (const extra of ['libm.so.6', 'librt.so.1', 'libdl.so.2', 'libpthread.so.0']) {
      const path = join(dirname([...needed].find((lib) => lib.endsWith('/libc.so.6'))), extra);
      if (existsSync(path)) needed.add(path);
    }
    for (const library of needed) {
      if (!library.endsWith('/libcuda.so.1') && !library.endsWith('/libnvidia-ml.so.1')) {
        place(root, library, library);
      }
    }
    mkdirSync(join(root, 'tmp'), { recursive: true });
    chmodSync(join(root, 'tmp'), 0o1777);
    // CUDA images set NVIDIA_DRIVER_CAPABILITIES themselves; without `compute` the NVIDIA
    // container runtime would mount NVML (its default, `utility`) but not libcuda.so.1.
    const changes = [
      `--change 'ENV NVIDIA_DRIVER_CAPABILITIES=compute,utility'`,
      `--change 'CMD ["/demo-probe"]'`,
    ].join(' ');
    execFileSync('sh', ['-c', `tar -C "${root}" -c . | docker import ${changes} - "${tag}"`], {
      stdio: ['ignore', 'ignore', 'pipe'],
    });
  } finally {
    rmSync(work, { recursive: true, force: true });
  }
}

const { values } = parseArgs({ options: { tag: { type: 'string', default: DEMO_IMAGE } } });
const tag = values.tag;
try {
  await buildDemoImage(tag);
  const size = execFileSync('docker', ['image', 'inspect', '--format', '{{.Size}}', tag], {
    encoding: 'utf8',
  }).trim();
  console.log(`built ${tag} (${(Number(size) / 2 ** 20).toFixed(1)} MiB): runs /demo-probe`);
} catch (error) {
  console.error(`demo image: ${error.stderr?.toString().trim() || error.message}`);
  process.exit(1);
}
