// gpushards installed as a user installs it: `npm install -g` of a packed tarball and of the
// folder, into a temporary prefix, offline with an empty npm cache (so nothing can come from a
// registry: the build bundles @gpushards/limits and the third-party dependencies into
// dist/main.js), then run from there; and `npx gpushards` from the repository.
import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import { mkdtempSync, readdirSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { dirname, join } from 'node:path';
import { after, describe, it } from 'node:test';
import { fileURLToPath } from 'node:url';

const REPO_ROOT = join(dirname(fileURLToPath(import.meta.url)), '../../..');
const work = mkdtempSync(join(tmpdir(), 'gpushards-install-'));
// An empty cache and --offline: any registry request fails the install.
const npmEnv = {
  ...process.env,
  npm_config_cache: join(work, 'npm-cache'),
  npm_config_offline: 'true',
  npm_config_audit: 'false',
  npm_config_fund: 'false',
  npm_config_update_notifier: 'false',
};

function run(command, args, options = {}) {
  const done = spawnSync(command, args, { encoding: 'utf8', env: npmEnv, ...options });
  assert.ok(done.error === undefined, String(done.error));
  return done;
}

function npm(args, cwd = REPO_ROOT) {
  const done = run('npm', args, { cwd });
  assert.equal(done.status, 0, `npm ${args.join(' ')}:\n${done.stdout}${done.stderr}`);
  return done;
}

/** Runs the installed gpushards from outside the repository, where nothing else resolves. */
function checkInstalled(prefix) {
  const bin = join(prefix, 'bin', 'gpushards');
  const help = run(bin, ['--help'], { cwd: work });
  assert.equal(help.status, 0, help.stderr);
  assert.match(help.stdout, /^Usage: gpushards \[options\] \[command\]/);
  assert.match(help.stdout, /Exit codes:/);
  // A size goes through @gpushards/limits' parser: the bundled copy answers.
  const badSize = run(
    bin,
    [
      'shards',
      'create',
      'x',
      '-i',
      'img',
      '-m',
      '12gb',
      '--url',
      'http://127.0.0.1:9',
      '--token',
      't',
    ],
    { cwd: work },
  );
  assert.equal(badSize.status, 2, badSize.stderr);
  assert.match(badSize.stderr, /--memory: .*12g/);
  const completion = run(bin, ['completion', 'bash'], { cwd: work });
  assert.match(completion.stdout, /complete -F _gpushards gpushards/);
}

after(() => rmSync(work, { recursive: true, force: true }));

describe('installing gpushards', () => {
  it('npm install -g of the packed tarball, offline, into a temporary prefix', () => {
    const packed = npm(['pack', './apps/cli', '--pack-destination', work, '--json']);
    const [{ filename, files }] = JSON.parse(packed.stdout);
    assert.deepEqual(files.map((f) => f.path).sort(), [
      'bin/gpushards.js',
      'dist/main.js',
      'package.json',
    ]);
    const prefix = join(work, 'from-tarball');
    npm(['install', '-g', '--prefix', prefix, join(work, filename)], work);
    assert.deepEqual(readdirSync(join(prefix, 'lib/node_modules')), ['gpushards-cli']);
    checkInstalled(prefix);
  });

  it('npm install -g ./apps/cli from the repository, offline, into a temporary prefix', () => {
    const prefix = join(work, 'from-folder');
    npm(['install', '-g', '--prefix', prefix, './apps/cli']);
    checkInstalled(prefix);
  });

  it('npx gpushards from the repository', () => {
    const help = run('npx', ['gpushards', '--help'], { cwd: REPO_ROOT });
    assert.equal(help.status, 0, help.stderr);
    assert.match(help.stdout, /^Usage: gpushards/);
  });
});
