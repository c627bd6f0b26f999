import { execFileSync } from 'node:child_process';
import { chmodSync, copyFileSync, existsSync, mkdirSync, mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';

/** The monorepo's root, from test/e2e/dist/support. */
export const REPO_ROOT = fileURLToPath(new URL('../../../../', import.meta.url));

export interface NativeBuild {
  /** libvgpu.so, the interposer every shard container preloads. */
  readonly interposer: string;
  /** native/fakes' libcuda.so.1 and libnvidia-ml.so.1 (what GPUSHARDS_FAKE_LIBRARY_DIR names). */
  readonly fakeDriverDir: string;
}

/** native/build as `bash native/run-tests.sh` leaves it; builds (no tests) when it is missing. */
export function nativeBuild(): NativeBuild {
  const source = join(REPO_ROOT, 'native');
  const build = join(source, 'build');
  const interposer = join(build, 'libvgpu.so');
  const fakeDriverDir = join(build, 'fake-driver');
  const present = () =>
    existsSync(interposer) &&
    existsSync(join(fakeDriverDir, 'libcuda.so.1')) &&
    existsSync(join(fakeDriverDir, 'libnvidia-ml.so.1'));
  if (!present()) {
    execFileSync('cmake', ['-S', source, '-B', build, '-DCMAKE_BUILD_TYPE=Release'], {
      stdio: 'ignore',
    });
    execFileSync('cmake', ['--build', build, '-j', '2'], { stdio: 'ignore' });
  }
  if (!present()) throw new Error(`native/build lacks libvgpu.so or fake-driver/ after building`);
  return { interposer, fakeDriverDir };
}

/** Shared libraries a binary needs, as this host's loader resolves them. */
function libraryDependencies(binary: string, libraryPath: string): string[] {
  const out = execFileSync('ldd', [binary], {
    encoding: 'utf8',
    env: { ...process.env, LD_LIBRARY_PATH: libraryPath },
  });
  return [...out.matchAll(/(\/\S+\.so[.\d]*)/g)].map((match) => match[1]!);
}

/**
 * Imports the suite's shard image from a local root filesystem (no registry is reachable):
 * /e2e-probe (test/e2e/probe/e2e-probe.c, linked against libcuda.so.1) and the glibc files it
 * and libvgpu.so need, but no libcuda: the agent mounts the fake driver where a real one
 * would be. Labelled with the run id so that cleanup removes only this run's image.
 */
export function importProbeImage(tag: string, native: NativeBuild, runLabel: string): void {
  const work = mkdtempSync(join(tmpdir(), 'gpushards-e2e-image-'));
  try {
    const root = join(work, 'rootfs');
    const probe = join(work, 'e2e-probe');
    execFileSync('cc', [
      '-O2',
      `-I${join(REPO_ROOT, 'native/vgpu/include')}`,
      '-o',
      probe,
      join(REPO_ROOT, 'test/e2e/probe/e2e-probe.c'),
      `-L${native.fakeDriverDir}`,
      '-l:libcuda.so.1',
    ]);
    const place = (source: string, target: string) => {
      mkdirSync(dirname(join(root, target)), { recursive: true });
      copyFileSync(source, join(root, target));
    };
    place(probe, '/e2e-probe');
    chmodSync(join(root, 'e2e-probe'), 0o755);
    const needed = new Set(
      [probe, native.interposer].flatMap((binary) =>
        libraryDependencies(binary, native.fakeDriverDir),
      ),
    );
    for (const library of needed) {
      if (!library.endsWith('/libcuda.so.1') && !library.endsWith('/libnvidia-ml.so.1')) {
        place(library, library);
      }
    }
    mkdirSync(join(root, 'tmp'), { recursive: true });
    chmodSync(join(root, 'tmp'), 0o1777);
    execFileSync(
      'sh',
      [
        '-c',
        `tar -C "${root}" -c . | docker import --change 'CMD ["/e2e-probe","hold","0"]' ` +
          `--change 'LABEL ${runLabel}' - "${tag}"`,
      ],
      { stdio: ['ignore', 'ignore', 'pipe'] },
    );
  } finally {
    rmSync(work, { recursive: true, force: true });
  }
}
