// Checks of the deployment files that need no registry (the images cannot be built here):
//   node --test deploy/
// compose.yaml parses and is wired as docs/operations.md says (no compose plugin is packaged for
// these machines, so `docker compose config` is not run), the Dockerfile copies only what exists or a build makes, the
// agent's env file lists exactly the variables of docs/agent.md, the systemd unit verifies,
// and the Grafana dashboard queries only metrics docs/metrics.md documents.
import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import { existsSync, readFileSync } from 'node:fs';
import { dirname, join } from 'node:path';
import { test } from 'node:test';
import { fileURLToPath } from 'node:url';

// `yaml` comes with the workspace's dev dependencies (through nx).
import { parse as parseYaml } from 'yaml';

const here = dirname(fileURLToPath(import.meta.url));
const root = join(here, '..');
const read = (path) => readFileSync(join(root, path), 'utf8');

/** What a build makes: the TypeScript projects' dist folders. */
const BUILD_OUTPUTS = ['libs/limits/dist/', 'libs/protocol/dist/', 'apps/control-plane/dist/'];

test('compose.yaml runs PostgreSQL, NATS, migrations and the control plane from the Dockerfile', () => {
  const compose = parseYaml(read('deploy/compose.yaml'), { merge: true });
  assert.deepEqual(Object.keys(compose.services).sort(), [
    'control-plane',
    'migrate',
    'nats',
    'postgres',
  ]);
  const controlPlane = compose.services['control-plane'];
  assert.equal(controlPlane.build.dockerfile, 'deploy/control-plane/Dockerfile');
  // The Dockerfile's base image argument reaches the build, defaulting to the Dockerfile's own.
  const dockerfileBase = /^ARG NODE_IMAGE=(\S+)$/m.exec(
    read('deploy/control-plane/Dockerfile'),
  )?.[1];
  assert.equal(controlPlane.build.args.NODE_IMAGE, `\${NODE_IMAGE:-${dockerfileBase}}`);
  assert.ok(existsSync(join(here, controlPlane.build.context, controlPlane.build.dockerfile)));
  assert.match(controlPlane.environment.DATABASE_URL, /^postgresql:\/\/.*@postgres:5432\//);
  assert.equal(controlPlane.environment.GPUSHARDS_NATS_URL, 'nats://nats:4222');
  assert.equal(controlPlane.depends_on.migrate.condition, 'service_completed_successfully');
  assert.deepEqual(compose.services.migrate.command, ['npm', 'run', 'db:migrate']);
  assert.ok(JSON.parse(read('package.json')).scripts['db:migrate'], 'npm run db:migrate exists');
  // The NATS server reads the configuration generate-config.mjs writes (nats-server.conf).
  assert.deepEqual(compose.services.nats.command, ['-c', '/etc/gpushards/nats/nats-server.conf']);
  assert.ok(existsSync(join(root, 'deploy/nats/nats-server.conf')));
});

test('the Dockerfile copies files that exist or that the build makes, and .dockerignore lets them in', () => {
  const dockerfile = read('deploy/control-plane/Dockerfile');
  const ignore = read('.dockerignore')
    .split('\n')
    .filter((line) => line.startsWith('!'))
    .map((line) => line.slice(1));
  const allowed = (path) =>
    ignore.some((pattern) => {
      const regex = new RegExp(`^${pattern.replace(/\./g, '\\.').replace(/\*/g, '[^/]+')}`);
      return regex.test(path);
    });
  const sources = [...dockerfile.matchAll(/^COPY (.+) \S+$/gm)].flatMap((m) => m[1].split(' '));
  assert.ok(sources.length > 0);
  for (const source of sources) {
    assert.ok(
      existsSync(join(root, source)) || BUILD_OUTPUTS.includes(source),
      `${source} neither exists nor is a build output`,
    );
    assert.ok(allowed(source), `${source} is excluded by .dockerignore`);
  }
  assert.match(dockerfile, /CMD \["node", "apps\/control-plane\/dist\/main\.js"\]/);
  assert.ok(existsSync(join(root, 'apps/control-plane/src/main.ts')));
});

test('agent.env names every variable of docs/agent.md and no other', () => {
  const table = read('docs/agent.md').split('## Environment')[1].split('\n## ')[0];
  const documented = new Set(
    [...table.matchAll(/^\| (.+?) \|/gm)].flatMap((m) =>
      [...m[1].matchAll(/`([A-Z_]+)`/g)].map((v) => v[1]),
    ),
  );
  const listed = new Set(
    [...read('deploy/agent/agent.env').matchAll(/^#?([A-Z][A-Z_]+)=/gm)].map((m) => m[1]),
  );
  assert.ok(documented.size >= 20, `found only ${documented.size} variables in docs/agent.md`);
  assert.deepEqual([...listed].sort(), [...documented].sort());
});

test('the systemd unit starts the agent with the env file and verifies', (t) => {
  const unit = read('deploy/agent/gpushards-agent.service');
  assert.match(unit, /^EnvironmentFile=\/etc\/gpushards\/agent\.env$/m);
  assert.match(unit, /^ExecStart=\/usr\/bin\/node \/opt\/gpushards\/apps\/agent\/dist\/main\.js$/m);
  assert.match(unit, /^Requires=docker\.service$/m);
  assert.match(unit, /^WantedBy=multi-user\.target$/m);
  if (spawnSync('systemd-analyze', ['--version']).status !== 0) {
    t.diagnostic('systemd-analyze is not installed: unit syntax not verified');
    return;
  }
  const result = spawnSync(
    'systemd-analyze',
    ['verify', join(here, 'agent/gpushards-agent.service')],
    {
      encoding: 'utf8',
    },
  );
  // Only problems with this unit count (verify also reports the machine's other units).
  const ours = `${result.stdout}${result.stderr}`
    .split('\n')
    .filter((line) => line.includes('gpushards-agent'));
  assert.deepEqual(ours, []);
});

test('the Grafana dashboard queries only documented metrics and covers each of them', () => {
  const dashboard = JSON.parse(read('deploy/grafana/gpushards-dashboard.json'));
  const documented = new Set(
    [...read('docs/metrics.md').matchAll(/\| `(gpushards_[a-z_]+)` \|/g)].map((m) => m[1]),
  );
  // The placement histogram is documented with the shards module.
  for (const doc of ['docs/metrics.md', 'docs/fleet-and-shards.md']) {
    for (const m of read(doc).matchAll(/`(gpushards_[a-z_]+_seconds)(\{[a-z]+\})?`/g)) {
      documented.add(m[1]);
    }
  }
  const panels = dashboard.panels.filter((panel) => panel.type !== 'row');
  const used = new Set();
  const ids = new Set();
  for (const panel of panels) {
    assert.ok(!ids.has(panel.id), `panel id ${panel.id} twice`);
    ids.add(panel.id);
    assert.ok(panel.targets?.length > 0, `panel "${panel.title}" has no query`);
    for (const target of panel.targets) {
      for (const [name] of target.expr.matchAll(/gpushards_[a-z_]+/g)) {
        const base = name.replace(/_(bucket|count|sum)$/, '');
        assert.ok(documented.has(base), `"${panel.title}" queries ${name}, not in the docs`);
        used.add(base);
      }
    }
  }
  const wanted = [
    'gpushards_hosts',
    'gpushards_gpu_total_bytes',
    'gpushards_gpu_reserved_bytes',
    'gpushards_gpu_used_bytes',
    'gpushards_shard_limit_bytes',
    'gpushards_shard_used_bytes',
    'gpushards_team_quota_bytes',
    'gpushards_team_reserved_bytes',
    'gpushards_placement_duration_seconds',
  ];
  for (const name of wanted) assert.ok(used.has(name), `no panel shows ${name}`);
});
