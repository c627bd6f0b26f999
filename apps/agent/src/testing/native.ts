import { execFileSync } from 'node:child_process';
import { existsSync, readdirSync, statSync } from 'node:fs';
import { dirname, join } from 'node:path';

import { REPO_ROOT } from './paths.js';

export interface NativeArtifacts {
  readonly buildDir: string;
  readonly interposer: string;
  find(name: string): string;
}

export interface FakeLibraries {
  /** The folder holding the fake libcuda.so.1 and libnvidia-ml.so.1. */
  readonly dir: string;
  readonly cuda: string;
  readonly nvml: string;
}

let built: NativeArtifacts | undefined;

/**
 * Builds native/ into native/build (configuring it the first time; incremental after) and
 * returns where libvgpu.so and the fake NVIDIA libraries are. Tests use the real ones.
 */
export function nativeArtifacts(): NativeArtifacts {
  if (built) return built;
  const source = join(REPO_ROOT, 'native');
  const buildDir = join(source, 'build');
  const run = (args: string[]): void => {
    try {
      execFileSync('cmake', args, { stdio: ['ignore', 'pipe', 'pipe'], encoding: 'utf8' });
    } catch (error) {
      const { stdout = '', stderr = '' } = error as { stdout?: string; stderr?: string };
      throw new Error(
        `cmake ${args.join(' ')} failed:\n${stdout.slice(-2000)}${stderr.slice(-2000)}`,
        { cause: error },
      );
    }
  };
  if (!existsSync(join(buildDir, 'CMakeCache.txt'))) run(['-S', source, '-B', buildDir]);
  run(['--build', buildDir, '--parallel', '2']);
  const find = (name: string): string => {
    const found = findFile(buildDir, name);
    if (found === undefined) throw new Error(`${name} was not built under ${buildDir}`);
    return found;
  };
  built = { buildDir, interposer: find('libvgpu.so'), find };
  return built;
}

/** native/fakes' libcuda.so.1 and libnvidia-ml.so.1, built. */
export function fakeLibraries(): FakeLibraries {
  const native = nativeArtifacts();
  const cuda = native.find('libcuda.so.1');
  const nvml = native.find('libnvidia-ml.so.1');
  if (dirname(cuda) !== dirname(nvml)) {
    throw new Error(`the fake libraries are in different folders: ${cuda}, ${nvml}`);
  }
  return { dir: dirname(cuda), cuda, nvml };
}

function findFile(dir: string, name: string): string | undefined {
  for (const entry of readdirSync(dir)) {
    const path = join(dir, entry);
    const stat = statSync(path, { throwIfNoEntry: false });
    if (stat === undefined) continue;
    if (entry === name && stat.isFile()) return path;
    if (stat.isDirectory() && entry !== 'CMakeFiles') {
      const found = findFile(path, name);
      if (found) return found;
    }
  }
  return undefined;
}

/**
 * The UUID the fake driver gives GPU `index` of a simulated host (native/fakes/fake_common.c:
 * FNV-1a of the seed in the five bytes before the index), written out again so a test notices
 * if either side changes.
 */
export function fakeGpuUuid(seed: string, index: number): string {
  let hash = 0xcbf29ce484222325n;
  for (const byte of Buffer.from(seed, 'utf8')) {
    hash = ((hash ^ BigInt(byte)) * 0x100000001b3n) & 0xffffffffffffffffn;
  }
  const seeded = Array.from({ length: 5 }, (_, i) =>
    Number((hash >> BigInt(8 * i)) & 0xffn)
      .toString(16)
      .padStart(2, '0'),
  ).join('');
  return `GPU-fa4e5000-0000-4000-8000-${seeded}${index.toString(16).padStart(2, '0')}`;
}
