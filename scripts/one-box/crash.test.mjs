// The one-box killed with SIGKILL at random points of create, stop, resize and delete bursts,
// ROUNDS times, on its embedded database and the real Docker engine, then started again:
// every shard settles (nothing stuck in PLACED, STARTING or STOPPING), no shard or container is
// duplicated, every running shard has its one running container and nothing else runs,
// reservations equal what the live shards hold, and every create resent with its idempotency
// key is answered with the shard it made the first time (when the first answer came back).
// Bounded: ROUNDS rounds, each burst killed within KILL_WITHIN_MS.
//   node --test scripts/one-box/crash.test.mjs
import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import { randomInt, randomUUID } from 'node:crypto';
import { mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, before, test } from 'node:test';

import { freePort, startLauncher } from './launcher.mjs';
import { REPO_ROOT } from './paths.mjs';

const IMAGE = `gpushards-test/one-box-crash-${process.pid}:local`;
const ROUNDS = Number(process.env.GPUSHARDS_CRASH_ROUNDS ?? 3);
const KILL_WITHIN_MS = 1500;
const START_TIMEOUT_MS = Number(process.env.GPUSHARDS_CRASH_START_MS ?? 8 * 60_000);
const HOLDING = ['PLACED', 'STARTING', 'RUNNING', 'STOPPING'];

const dataDir = mkdtempSync(join(tmpdir(), 'gpushards-one-box-crash-'));
let port;
let launcher;

/** The answer's data, or undefined when the request got no answer (the process died). */
async function call(url, token, query, variables = {}) {
  try {
    const response = await fetch(url, {
      method: 'POST',
      headers: { 'content-type': 'application/json', authorization: `Bearer ${token}` },
      body: JSON.stringify({ query, variables }),
    });
    return await response.json();
  } catch {
    return undefined;
  }
}

async function graphql(url, token, query, variables = {}) {
  const body = await call(url, token, query, variables);
  assert.ok(body, 'no answer');
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

/** Every shard container of this host: id, shard, Docker state. */
function containers() {
  const out = docker(
    'ps',
    '-a',
    '--no-trunc',
    '--filter',
    `label=io.gpushards.host=${hostId()}`,
    '--format',
    '{{.ID}} {{.Label "io.gpushards.shard"}} {{.State}}',
  );
  return out === ''
    ? []
    : out.split('\n').map((line) => {
        const [id, shardId, state] = line.split(' ');
        return { id, shardId, state };
      });
}

const SHARDS = `{ shards(first: 500) { edges { node { id name state containerId gpuCount
  limitPerGpu { bytes } } } } }`;
const CREATE = `mutation ($input: CreateShardInput!) { createShard(input: $input) { id name } }`;

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
  if (launcher && launcher.child.exitCode === null && launcher.child.signalCode === null) {
    launcher.child.kill('SIGINT');
    await launcher.exited;
  }
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

test(`the one-box killed with SIGKILL in ${ROUNDS} bursts converges: nothing stuck, lost or duplicated`, async () => {
  launcher = startLauncher({ dataDir, port, timeoutMs: START_TIMEOUT_MS });
  let url = await launcher.ready;
  const admin = readFileSync(join(dataDir, 'admin-token'), 'utf8').trim();
  const { createTeam } = await graphql(url, admin, 'mutation { createTeam(name: "crash") { id } }');
  await graphql(
    url,
    admin,
    'mutation($t: ID!) { setQuotaPolicy(teamId: $t, input: {maxTotal: "1t", maxShards: 1000, maxPerShard: "8g"}) { id } }',
    { t: createTeam.id },
  );
  const member = (
    await graphql(
      url,
      admin,
      'mutation($t: ID!) { createApiToken(teamId: $t, role: MEMBER, name: "crash") { secret } }',
      { t: createTeam.id },
    )
  ).createApiToken.secret;

  /** key → the shard id its first answer named (undefined: no answer came back). */
  const creates = new Map();
  for (let round = 0; round < ROUNDS; round++) {
    const { shards } = await graphql(url, member, SHARDS);
    const live = shards.edges.map((e) => e.node).filter((s) => s.state !== 'DELETED');
    const requests = [];
    const inFlight = [];
    for (let i = 0; i < 6; i++) {
      const key = `r${round}-c${i}-${randomUUID()}`;
      creates.set(key, undefined);
      inFlight.push(key);
      requests.push(
        call(url, member, CREATE, {
          input: { name: key, image: IMAGE, memoryPerGpu: '256m', idempotencyKey: key },
        }).then((body) => {
          const shard = body?.data?.createShard;
          if (shard) creates.set(key, shard.id);
        }),
      );
    }
    for (const shard of live) {
      const pick = randomInt(4);
      const id = shard.id;
      if (pick === 0) {
        requests.push(
          call(url, member, 'mutation($id: ID!) { stopShard(id: $id, graceSeconds: 0) { id } }', {
            id,
          }),
        );
      } else if (pick === 1) {
        requests.push(
          call(
            url,
            member,
            'mutation($id: ID!) { resizeShard(id: $id, memoryPerGpu: "384m") { id } }',
            { id },
          ),
        );
      } else if (pick === 2) {
        requests.push(
          call(url, member, 'mutation($id: ID!) { deleteShard(id: $id) { id } }', { id }),
        );
      }
    }
    await new Promise((resolve) => setTimeout(resolve, randomInt(KILL_WITHIN_MS)));
    launcher.child.kill('SIGKILL');
    assert.equal(await launcher.exited, 'SIGKILL');
    await Promise.all(requests);
    launcher = startLauncher({ dataDir, port, timeoutMs: START_TIMEOUT_MS });
    url = await launcher.ready;

    // This round's creates resent with their keys after the restart, as a client whose call
    // was cut off would: the original shard where the first answer came back. (Before the next
    // round: a later resize changes the shard, and a create resent after it is another request.)
    for (const key of inFlight) {
      const first = creates.get(key);
      const { createShard } = await graphql(url, member, CREATE, {
        input: { name: key, image: IMAGE, memoryPerGpu: '256m', idempotencyKey: key },
      });
      if (first !== undefined) assert.equal(createShard.id, first, `resent ${key}`);
      creates.set(key, createShard.id);
    }
  }

  const settled = await waitFor(
    'every shard to leave PLACED, STARTING and STOPPING',
    async () => {
      const { shards } = await graphql(url, member, SHARDS);
      const nodes = shards.edges.map((e) => e.node);
      return {
        done: nodes.every((s) => !['PLACED', 'STARTING', 'STOPPING'].includes(s.state)),
        value: nodes,
      };
    },
    90_000,
  );
  // One shard per key.
  const names = settled.map((s) => s.name);
  assert.equal(new Set(names).size, names.length, 'a create was duplicated');
  assert.deepEqual(new Set(names), new Set(creates.keys()));
  // Every create resent once more at the end, after later rounds resized some of them: still
  // the same request (compared with what it first asked for), answered with its shard.
  for (const [key, id] of creates) {
    const { createShard } = await graphql(url, member, CREATE, {
      input: { name: key, image: IMAGE, memoryPerGpu: '256m', idempotencyKey: key },
    });
    assert.equal(createShard.id, id, `${key} resent after the rounds`);
  }

  // Containers: at most one per shard; a running one exactly for each RUNNING shard.
  const boxes = containers();
  const perShard = new Map();
  for (const box of boxes) perShard.set(box.shardId, [...(perShard.get(box.shardId) ?? []), box]);
  for (const [shardId, list] of perShard)
    assert.equal(list.length, 1, `shard ${shardId} has ${list.length} containers`);
  const byId = new Map(settled.map((s) => [s.id, s]));
  for (const shard of settled) {
    const box = perShard.get(shard.id)?.[0];
    if (shard.state === 'RUNNING') {
      assert.equal(
        box?.state,
        'running',
        `RUNNING shard ${shard.id} has ${box?.state ?? 'no'} container`,
      );
      assert.equal(box.id, shard.containerId);
    } else {
      assert.notEqual(
        box?.state,
        'running',
        `${shard.state} shard ${shard.id} has a running container`,
      );
    }
    if (shard.state === 'DELETED')
      assert.equal(box, undefined, `deleted shard ${shard.id} kept its container`);
  }
  for (const box of boxes) assert.ok(byId.has(box.shardId), `container ${box.id} of no shard`);

  // Reservations equal the live shards.
  const { hosts } = await graphql(
    url,
    admin,
    '{ hosts { edges { node { gpus { reserved { bytes } } } } } }',
  );
  const reserved = hosts.edges
    .flatMap((e) => e.node.gpus)
    .reduce((sum, gpu) => sum + Number(gpu.reserved.bytes), 0);
  const held = settled
    .filter((s) => HOLDING.includes(s.state))
    .reduce((sum, s) => sum + Number(s.limitPerGpu.bytes) * s.gpuCount, 0);
  assert.equal(reserved, held, 'reserved bytes on the GPUs differ from what live shards hold');

  launcher.child.kill('SIGINT');
  assert.equal(await launcher.exited, 0, launcher.output);
});
