#!/usr/bin/env node
// `node deploy/control-plane/local-node-image.mjs [--tag NAME]`: builds a stand-in for the
// control plane image's base (`node:20-bookworm-slim`) with no registry, from this machine's
// own files: its `node` binary and npm, a shell, `mkdir` and `chown` (the Dockerfile's RUN
// lines), the shared libraries they load (as `ldd` resolves them), and the `node` user
// (uid 1000), imported with `docker import`. Then:
//
//   docker build -f deploy/control-plane/Dockerfile --build-arg NODE_IMAGE=NAME -t ... .
//
// npm inside it trusts what this machine trusts (its CA bundle, when it has one); Docker provides
// /etc/resolv.conf and /etc/hosts to every build and run container.
import { execFileSync } from 'node:child_process';
import {
  chmodSync,
  chownSync,
  copyFileSync,
  cpSync,
  existsSync,
  mkdirSync,
  mkdtempSync,
  realpathSync,
  rmSync,
  writeFileSync,
} from 'node:fs';
import { tmpdir } from 'node:os';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { parseArgs } from 'node:util';

export const LOCAL_NODE_IMAGE = 'gpushards/node-local:20';
const CA_BUNDLE = '/etc/ssl/certs/ca-certificates.crt';

/** An executable on PATH, as its real file. */
function executable(name) {
  return realpathSync(
    execFileSync('sh', ['-c', `command -v ${name}`], { encoding: 'utf8' }).trim(),
  );
}

/** Shared libraries a program needs, as this host's loader resolves them. */
function libraryDependencies(binary) {
  const out = execFileSync('ldd', [binary], { encoding: 'utf8' });
  return [...out.matchAll(/(\/\S+\.so[.\d]*)/g)].map((match) => match[1]);
}

function place(root, source, target, mode) {
  mkdirSync(dirname(join(root, target)), { recursive: true });
  copyFileSync(source, join(root, target));
  if (mode !== undefined) chmodSync(join(root, target), mode);
}

/** npm's package folder, from where its command resolves (…/node_modules/npm/bin/npm-cli.js). */
function npmFolder() {
  const cli = executable('npm');
  const folder = dirname(dirname(cli));
  if (!folder.endsWith('/npm')) throw new Error(`cannot find npm's folder from ${cli}`);
  return folder;
}

/** Builds the stand-in base image under `tag`; returns its size in bytes. */
export function buildLocalNodeImage(tag = LOCAL_NODE_IMAGE) {
  const work = mkdtempSync(join(tmpdir(), 'gpushards-node-image-'));
  try {
    const root = join(work, 'rootfs');
    const node = realpathSync(process.execPath);
    const tools = { sh: executable('sh'), mkdir: executable('mkdir'), chown: executable('chown') };
    place(root, node, '/usr/local/bin/node', 0o755);
    for (const [name, path] of Object.entries(tools)) place(root, path, `/bin/${name}`, 0o755);
    for (const library of new Set([node, ...Object.values(tools)].flatMap(libraryDependencies))) {
      place(root, library, library);
    }
    cpSync(npmFolder(), join(root, 'usr/local/lib/node_modules/npm'), { recursive: true });
    writeFileSync(
      join(root, 'usr/local/bin/npm'),
      '#!/bin/sh\nexec node /usr/local/lib/node_modules/npm/bin/npm-cli.js "$@"\n',
      { mode: 0o755 },
    );
    mkdirSync(join(root, 'etc'), { recursive: true });
    writeFileSync(
      join(root, 'etc/passwd'),
      'root:x:0:0:root:/root:/bin/sh\nnode:x:1000:1000::/home/node:/bin/sh\n',
    );
    writeFileSync(join(root, 'etc/group'), 'root:x:0:\nnode:x:1000:\n');
    mkdirSync(join(root, 'root'), { recursive: true });
    mkdirSync(join(root, 'home/node'), { recursive: true });
    mkdirSync(join(root, 'tmp'), { recursive: true });
    chmodSync(join(root, 'tmp'), 0o1777);
    chownSync(join(root, 'home/node'), 1000, 1000);
    // This machine's trust: the official image uses Node's own CA list, but a host behind a
    // TLS-inspecting proxy needs its bundle (Node reads it through NODE_EXTRA_CA_CERTS).
    const changes = [`--change 'ENV PATH=/usr/local/bin:/usr/bin:/bin'`];
    if (existsSync(CA_BUNDLE)) {
      place(root, CA_BUNDLE, CA_BUNDLE);
      changes.push(`--change 'ENV NODE_EXTRA_CA_CERTS=${CA_BUNDLE}'`);
    }
    changes.push(`--change 'CMD ["node"]'`);
    execFileSync(
      'sh',
      [
        '-c',
        `tar -C "${root}" --numeric-owner -c . | docker import ${changes.join(' ')} - "${tag}"`,
      ],
      {
        stdio: ['ignore', 'ignore', 'pipe'],
      },
    );
  } finally {
    rmSync(work, { recursive: true, force: true });
  }
  return Number(
    execFileSync('docker', ['image', 'inspect', '--format', '{{.Size}}', tag], {
      encoding: 'utf8',
    }),
  );
}

if (process.argv[1] && realpathSync(process.argv[1]) === fileURLToPath(import.meta.url)) {
  const { values } = parseArgs({ options: { tag: { type: 'string', default: LOCAL_NODE_IMAGE } } });
  try {
    const size = buildLocalNodeImage(values.tag);
    console.log(
      `built ${values.tag} (${(size / 2 ** 20).toFixed(1)} MiB): node and npm of this host`,
    );
  } catch (error) {
    console.error(`local node image: ${error.stderr?.toString().trim() || error.message}`);
    process.exit(1);
  }
}
