import assert from 'node:assert/strict';
import { readFileSync } from 'node:fs';

import { docker } from '../support/docker.js';
import { expectGraphqlError, type ShardView } from '../support/graphql.js';
import { waitFor } from '../support/processes.js';
import type { Runner } from '../support/runner.js';
import { FLEET, MiB } from '../support/system.js';
import type { ShardRequest, World } from '../support/world.js';

/**
 * Host a (two H100s) runs an MPS partition of 40 % (support/system.ts); b and c run none. Host
 * a, not the one-GPU host c: the fleet checks leave the A100 with no room for another shard.
 */
const HOST = 'a';
const POOL = 40;
const SHARE = 30;
const MPS_IN_SHARD = '/run/gpushards/mps';

/** The limits file's first device (native/vgpu's gpushards_limits.h: a 128-byte header). */
const DEVICE_0 = 128;
const SHARE_PERMILLE = DEVICE_0 + 64;
const COMPUTE_MODE = DEVICE_0 + 68;
const MPS_THREAD_PERCENT = DEVICE_0 + 72;
const MODE_ISOLATED = 3;

interface PoolView {
  id: string;
  computeIsolatedPoolPercent: number;
  gpus: {
    uuid: string;
    index: number;
    computeIsolatedPoolPercent: number;
    computeIsolatedPercent: number;
  }[];
}

interface Mount {
  Source: string;
  Destination: string;
  RW: boolean;
}

const isolated = (name: string, share: number): ShardRequest => ({
  name,
  memoryPerGpu: '1g',
  computeSharePercent: share,
  computeMode: 'ISOLATED',
});

/** The one GPU a shard holds. */
function gpuOf(shard: ShardView): { uuid: string; index: number } {
  const live = shard.gpus.filter((g) => g.releasedAt === null);
  assert.equal(live.length, 1, JSON.stringify(shard.gpus));
  return { uuid: live[0]!.gpuUuid, index: live[0]!.index };
}

/**
 * ISOLATED compute shards (docs/compute.md, "Isolated shards"; docs/agent.md, "MPS partition")
 * with the real agent, libvgpu.so and Docker: an isolated shard gets its share of the host's
 * partition, and a process of it can use CUDA (libvgpu.so refuses CUDA to a shard that should
 * be an MPS client and is not); every other shard of the host runs in the rest, 100 − P.
 */
export function isolatedChecks(runner: Runner, world: World): void {
  const { system } = world;
  const hostId = () => system.hostId(HOST);
  /** The shards the checks share: the 30 % one and the 20 % one on the other GPU. */
  const made: Record<string, ShardView & { hostId: string; containerId: string }> = {};
  const earlier = (name: string) => {
    const shard = made[name];
    if (shard === undefined) throw new Error(`needs shard ${name} of an earlier check`);
    return shard;
  };
  const vision = () => world.team('vision').token;

  const pools = async (n: 1 | 2 = 1): Promise<Map<string, PoolView>> => {
    const { hosts } = await system.admin<{ hosts: { edges: { node: PoolView }[] } }>(
      `query { hosts(first: 500) { edges { node {
        id computeIsolatedPoolPercent
        gpus { uuid index computeIsolatedPoolPercent computeIsolatedPercent }
      } } } }`,
      {},
      n,
    );
    return new Map(hosts.edges.map((e) => [e.node.id, e.node]));
  };
  /** Gpu.computeIsolatedPercent of each of host a's GPUs, by index. */
  const isolatedPercents = async () =>
    (await pools()).get(hostId())!.gpus.map((g) => g.computeIsolatedPercent);
  const inspect = <T>(containerId: string, what: string): T =>
    JSON.parse(docker('inspect', '--format', `{{json ${what}}}`, containerId)) as T;
  const env = (containerId: string) => inspect<string[]>(containerId, '.Config.Env');
  const mounts = (containerId: string) => inspect<Mount[]>(containerId, '.Mounts');

  runner.check(
    `isolated: host a registers an MPS partition of ${POOL} %: Host and Gpu computeIsolatedPoolPercent on both control planes; none on b and c`,
    async () => {
      for (const n of [1, 2] as const) {
        const hosts = await pools(n);
        for (const spec of FLEET) {
          const host = hosts.get(system.hostId(spec.key))!;
          const pool = spec.key === HOST ? POOL : 0;
          assert.equal(host.computeIsolatedPoolPercent, pool, `host ${spec.key} (cp${n})`);
          for (const gpu of host.gpus) {
            assert.deepEqual(
              [gpu.computeIsolatedPoolPercent, gpu.computeIsolatedPercent],
              [pool, 0],
              `host ${spec.key} GPU ${gpu.index} (cp${n})`,
            );
          }
        }
      }
    },
  );

  runner.check(
    `isolated: ISOLATED ${SHARE} % runs on host a as an MPS client: the pipe folder read-only, CUDA_MPS_* and its limits file at ${SHARE} (mode 3); the rest's shards at ${100 - POOL}`,
    async () => {
      const shard = await world.runningShard('vision', isolated('isolated-30', SHARE));
      assert.equal(shard.hostId, hostId(), 'only host a has a partition');
      made.first = shard;
      // Its own process holds its memory, and one more process gets CUDA.
      const probe = await waitFor(
        'the probe holding its memory',
        () => world.probeOutput(shard.containerId).find((line) => 'held' in line),
        20_000,
        250,
      );
      assert.equal(probe.result, 0, JSON.stringify(probe));
      assert.equal(world.allocateIn(shard.containerId, 64 * MiB), 0, 'CUDA in a second process');

      const mps = mounts(shard.containerId).find((m) => m.Destination === MPS_IN_SHARD);
      assert.equal(mps?.Source, system.mpsPipeDir(HOST), JSON.stringify(mps));
      assert.equal(mps.RW, false, 'read-only');
      const variables = env(shard.containerId);
      for (const variable of [
        `CUDA_MPS_PIPE_DIRECTORY=${MPS_IN_SHARD}`,
        `CUDA_MPS_ACTIVE_THREAD_PERCENTAGE=${SHARE}`,
      ]) {
        assert.ok(variables.includes(variable), `${variable} in ${variables.join(' ')}`);
      }
      const limitsFile = mounts(shard.containerId).find(
        (m) => m.Destination === '/etc/gpushards/limits',
      )!.Source;
      const limits = readFileSync(limitsFile);
      assert.deepEqual(
        [
          limits.readUInt32LE(SHARE_PERMILLE),
          limits.readUInt32LE(COMPUTE_MODE),
          limits.readUInt32LE(MPS_THREAD_PERCENT),
        ],
        [SHARE * 10, MODE_ISOLATED, SHARE],
        'limits file: compute_share_permille, compute_mode, mps_thread_percent',
      );
      const percents = [0, 0];
      percents[gpuOf(shard).index] = SHARE;
      assert.deepEqual(await isolatedPercents(), percents, 'Gpu.computeIsolatedPercent');

      // A shard of the rest on the same host (placed by the fleet checks): an MPS client at
      // 100 − P that still gets CUDA.
      const rest = world.ledger.onHost(hostId()).find((s) => s.id !== shard.id && s.containerId);
      assert.ok(rest?.containerId !== undefined, 'host a runs another shard of the suite');
      const restEnv = env(rest.containerId);
      assert.ok(
        restEnv.includes(`CUDA_MPS_ACTIVE_THREAD_PERCENTAGE=${100 - POOL}`),
        restEnv.join(' '),
      );
      assert.equal(world.allocateIn(rest.containerId, 64 * MiB), 0, 'CUDA in the rest');
      await world.converged();
    },
  );

  runner.check(
    'isolated: ISOLATED 20 % goes to the other GPU (10 % left on the first), 30 % more nowhere; ISOLATED without a share and GUARANTEED 70 % on host a refused; setShardCompute on an isolated shard is CONFLICT',
    async () => {
      const first = earlier('first');
      const second = await world.runningShard('vision', isolated('isolated-20', 20));
      made.second = second;
      assert.equal(second.hostId, hostId());
      assert.notEqual(gpuOf(second).index, gpuOf(first).index, 'the other GPU');
      const percents = [0, 0];
      percents[gpuOf(first).index] = SHARE;
      percents[gpuOf(second).index] = 20;
      assert.deepEqual(await isolatedPercents(), percents, 'Gpu.computeIsolatedPercent');

      const third = await expectGraphqlError(() =>
        world.createShard('vision', isolated('isolated-30-more', 30)),
      );
      assert.equal(third.code, 'NO_CAPACITY', third.message);
      assert.match(third.message, /30% of the isolated partition/, third.message);
      const reasons = third.errors[0]!.extensions!.hosts as { hostId: string; reason: string }[];
      const reason = (key: string) =>
        reasons.find((h) => h.hostId === system.hostId(key))?.reason ?? '';
      for (const left of [10, 20]) {
        assert.match(reason('a'), new RegExp(`with ${left}% isolated`), JSON.stringify(reasons));
      }
      for (const key of ['b', 'c']) {
        assert.match(reason(key), /no isolated \(MPS\) partition/, JSON.stringify(reasons));
      }

      const noShare = await expectGraphqlError(() =>
        world.createShard('vision', {
          name: 'isolated-no-share',
          memoryPerGpu: '1g',
          computeMode: 'ISOLATED',
        }),
      );
      assert.equal(noShare.code, 'BAD_USER_INPUT', noShare.message);
      assert.match(noShare.message, /compute share/, noShare.message);

      const guaranteed = await expectGraphqlError(() =>
        world.createShard('vision', {
          name: 'guaranteed-70',
          memoryPerGpu: '1g',
          computeSharePercent: 70,
          hostSelector: { tier: 'h100' },
        }),
      );
      assert.equal(guaranteed.code, 'NO_CAPACITY', guaranteed.message);
      assert.match(guaranteed.message, /with 60% compute.*with 60% compute/, guaranteed.message);

      const change = await expectGraphqlError(() =>
        system.as(
          vision(),
          `mutation ($id: ID!) {
            setShardCompute(id: $id, computeSharePercent: 20, computeMode: ISOLATED) { id }
          }`,
          { id: first.id },
        ),
      );
      assert.equal(change.code, 'CONFLICT', change.message);
      assert.match(change.message, /fixed while it holds its GPUs/, change.message);
      assert.deepEqual(await isolatedPercents(), percents, 'nothing changed');
      await world.converged();
    },
  );

  runner.check(
    `isolated: stopped, the ${SHARE} % shard gives its share back (ISOLATED ${POOL} % fits its GPU again); both deleted, their containers go`,
    async () => {
      const first = earlier('first');
      const second = earlier('second');
      await system.as(
        vision(),
        `mutation ($id: ID!) { stopShard(id: $id, graceSeconds: 2) { state } }`,
        { id: first.id },
      );
      await world.waitForState('vision', first.id, 'STOPPED');
      world.ledger.set(first.id, { state: 'STOPPED' });
      const percents = [0, 0];
      percents[gpuOf(second).index] = 20;
      assert.deepEqual(await isolatedPercents(), percents, 'Gpu.computeIsolatedPercent');
      // Both control planes' copies of the fleet follow within a second.
      for (const n of [1, 2] as const) {
        await waitFor(
          `control plane ${n} to preview ISOLATED ${POOL} % on the freed GPU`,
          async () => {
            const { placementPreview } = await system.as<{
              placementPreview: { fits: boolean; gpuUuids: string[] };
            }>(
              vision(),
              `query { placementPreview(input: {
                memoryPerGpu: "1g", computeSharePercent: ${POOL}, computeMode: ISOLATED
              }) { fits gpuUuids } }`,
              {},
              n,
            );
            return placementPreview.fits && placementPreview.gpuUuids[0] === gpuOf(first).uuid
              ? true
              : undefined;
          },
          5_000,
          100,
        );
      }
      for (const shard of [first, second]) {
        await system.as(vision(), `mutation ($id: ID!) { deleteShard(id: $id) { state } }`, {
          id: shard.id,
        });
        world.ledger.set(shard.id, { state: 'DELETED' });
        await waitFor(
          `${shard.name}'s container removed`,
          () => (world.containersOf(shard.id).length === 0 ? true : undefined),
          20_000,
          250,
        );
      }
      assert.deepEqual(await isolatedPercents(), [0, 0]);
      await world.converged();
    },
  );
}
