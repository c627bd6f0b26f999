// The one-box path end to end, as a person runs it: `node scripts/start.mjs` with a fresh data
// folder and a free port, then only the GraphQL API. The in-process agent must register this
// host by itself; a shard of the demo image must run with its cap; a restart must keep the data
// and find the running shard again. Needs the Docker engine; builds what is missing first.
//   node --test scripts/one-box/
import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import { mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, before, test } from 'node:test';

import { freePort, startLauncher } from './launcher.mjs';
import { REPO_ROOT } from './paths.mjs';

const IMAGE = `gpushards-test/one-box-${process.pid}:local`;
const GiB = 2 ** 30;

const dataDir = mkdtempSync(join(tmpdir(), 'gpushards-one-box-'));
let port;
let launcher;

/** Ctrl-C, as a person would; resolves to the exit code. */
async function stopLauncher(running) {
  running.child.kill('SIGINT');
  return running.exited;
}

async function graphql(url, token, query, variables = {}) {
  const response = await fetch(url, {
    method: 'POST',
    headers: { 'content-type': 'application/json', authorization: `Bearer ${token}` },
    body: JSON.stringify({ query, variables }),
  });
  const body = await response.json();
  assert.equal(body.errors, undefined, JSON.stringify(body.errors));
  return body.data;
}

async function waitFor(what, check, timeoutMs = 60_000) {
  const deadline = Date.now() + timeoutMs;
  let last;
  while (Date.now() < deadline) {
    last = await check();
    if (last.done) return last.value;
    await new Promise((resolve) => setTimeout(resolve, 250));
  }
  throw new Error(`timed out waiting for ${what}; last seen: ${JSON.stringify(last?.value)}`);
}

function docker(...args) {
  const result = spawnSync('docker', args, { encoding: 'utf8' });
  if (result.status !== 0) throw new Error(`docker ${args.join(' ')}: ${result.stderr.trim()}`);
  return result.stdout.trim();
}

function hostId() {
  return readFileSync(join(dataDir, 'host-id'), 'utf8').trim();
}

before(async () => {
  port = await freePort();
  const built = spawnSync(
    process.execPath,
    [join(REPO_ROOT, 'scripts/one-box/demo-image.mjs'), '--tag', IMAGE],
    { encoding: 'utf8' },
  );
  assert.equal(built.status, 0, `demo image: ${built.stdout}${built.stderr}`);
});

after(async () => {
  if (launcher && launcher.child.exitCode === null) await stopLauncher(launcher);
  let id;
  try {
    id = hostId();
  } catch {
    id = undefined;
  }
  if (id) {
    const left = docker('ps', '-aq', '--filter', `label=io.gpushards.host=${id}`);
    if (left !== '') spawnSync('docker', ['rm', '-f', ...left.split('\n')]);
  }
  spawnSync('docker', ['rmi', '-f', IMAGE]);
  rmSync(dataDir, { recursive: true, force: true });
});

test('npm start serves the API, runs a shard on the simulated host, and finds it again after a restart', async (t) => {
  launcher = startLauncher({ dataDir, port });
  const url = await launcher.ready;
  assert.match(launcher.output, /SIMULATED GPUs/);
  assert.match(launcher.output, /engine \S+ \(API /);
  const admin = readFileSync(join(dataDir, 'admin-token'), 'utf8').trim();

  const { me } = await graphql(url, admin, '{ me { role } }');
  assert.equal(me.role, 'ADMIN');

  // Nobody registered a host: the in-process agent did.
  const { hosts } = await graphql(
    url,
    admin,
    '{ hosts { edges { node { id state simulated gpus { total { bytes } } } } } }',
  );
  assert.equal(hosts.edges.length, 1);
  const host = hosts.edges[0].node;
  assert.equal(host.id, hostId());
  assert.equal(host.state, 'ONLINE');
  assert.equal(host.simulated, true);
  assert.deepEqual(
    host.gpus.map((gpu) => Number(gpu.total.bytes)),
    [8 * GiB, 8 * GiB],
  );

  const { createTeam } = await graphql(
    url,
    admin,
    'mutation { createTeam(name: "one-box") { id } }',
  );
  await graphql(
    url,
    admin,
    'mutation($t: ID!) { setQuotaPolicy(teamId: $t, input: {maxTotal: "4g", maxShards: 2, maxPerShard: "2g"}) { id } }',
    { t: createTeam.id },
  );
  const { createApiToken } = await graphql(
    url,
    admin,
    'mutation($t: ID!) { createApiToken(teamId: $t, role: MEMBER, name: "test") { secret } }',
    { t: createTeam.id },
  );
  const member = createApiToken.secret;
  const { createShard } = await graphql(
    url,
    member,
    'mutation($image: String!) { createShard(input: {name: "probe", image: $image, memoryPerGpu: "1g"}) { id } }',
    { image: IMAGE },
  );
  const shardId = createShard.id;
  const shardQuery =
    'query($id: ID!) { shard(id: $id) { state containerId limitPerGpu { bytes } } }';
  const running = await waitFor('the shard to run', async () => {
    const { shard } = await graphql(url, member, shardQuery, { id: shardId });
    return { done: shard.state === 'RUNNING', value: shard };
  });

  await t.test('the shard sees its cap and is refused past it', async () => {
    const logs = await waitFor('the probe to fill its shard', async () => {
      const text = docker('logs', running.containerId);
      return { done: text.includes('holding'), value: text };
    });
    assert.match(logs, /CUDA reports total 1\.\d+ GiB/);
    assert.match(logs, /refused after 1\.00 GiB with CUDA_ERROR_OUT_OF_MEMORY \(2\)/);
  });

  await t.test(
    'compute is governed: the shard mounts the host ledger, its GPU activity is reported',
    async () => {
      assert.match(
        launcher.output,
        /compute\s+shards take turns on each GPU by their compute share/,
      );
      const mounts = JSON.parse(
        docker('inspect', '--format', '{{json .Mounts}}', running.containerId),
      );
      const ledger = mounts.find((mount) => mount.Destination === '/run/gpushards/ledger');
      assert.ok(ledger, `no ledger mount in ${JSON.stringify(mounts)}`);
      assert.equal(ledger.Source, join(dataDir, 'ledger'));
      assert.equal(ledger.RW, true);
      // Without a ledger folder the agent reports no activity and busyRatio stays null.
      const gpus = await waitFor('a heartbeat with GPU activity', async () => {
        const { shard } = await graphql(
          url,
          member,
          'query($id: ID!) { shard(id: $id) { gpus { busyRatio } } }',
          { id: shardId },
        );
        return { done: shard.gpus.every((gpu) => gpu.busyRatio !== null), value: shard.gpus };
      });
      assert.deepEqual(
        gpus.map((gpu) => gpu.busyRatio),
        [0],
      );
    },
  );

  await t.test('/metrics has every series the Grafana dashboard queries', async () => {
    const metrics = await (await fetch(url.replace(/\/graphql$/, '/metrics'))).text();
    const dashboard = JSON.parse(
      readFileSync(join(REPO_ROOT, 'deploy/grafana/gpushards-dashboard.json'), 'utf8'),
    );
    const queries = dashboard.panels.flatMap((panel) => panel.targets ?? []).map((q) => q.expr);
    for (const [name] of queries.join('\n').matchAll(/gpushards_[a-z_]+/g)) {
      assert.match(metrics, new RegExp(`^${name}[{ ]`, 'm'), `/metrics has no ${name}`);
    }
  });

  assert.equal(await stopLauncher(launcher), 0, launcher.output);
  assert.match(launcher.output, /shard containers keep running/);
  assert.equal(docker('inspect', '--format', '{{.State.Running}}', running.containerId), 'true');

  launcher = startLauncher({ dataDir, port });
  const urlAgain = await launcher.ready;
  assert.match(launcher.output, /1 shard container\(s\) of this host running now \(found again/);
  const { shard } = await graphql(urlAgain, member, shardQuery, { id: shardId });
  assert.equal(shard.state, 'RUNNING');
  assert.equal(shard.containerId, running.containerId);
  assert.equal(shard.limitPerGpu.bytes, running.limitPerGpu.bytes);
  const { teams } = await graphql(urlAgain, admin, '{ teams { edges { node { name } } } }');
  assert.deepEqual(
    teams.edges.map((edge) => edge.node.name),
    ['one-box'],
  );

  const { deleteShard } = await graphql(
    urlAgain,
    member,
    'mutation($id: ID!) { deleteShard(id: $id) { state } }',
    { id: shardId },
  );
  assert.equal(deleteShard.state, 'DELETED');
  await waitFor('the container to be removed', async () => {
    const left = docker('ps', '-aq', '--filter', `label=io.gpushards.shard=${shardId}`);
    return { done: left === '', value: left };
  });
  assert.equal(await stopLauncher(launcher), 0, launcher.output);
});
