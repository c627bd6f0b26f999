import assert from 'node:assert/strict';

import { docker } from '../support/docker.js';
import {
  expectGraphqlError,
  HOST_FIELDS,
  type HostView,
  type ShardView,
} from '../support/graphql.js';
import { findProblems } from '../support/invariants.js';
import { sleep, waitFor } from '../support/processes.js';
import type { Runner } from '../support/runner.js';
import { FLEET, GiB, MiB } from '../support/system.js';
import type { ShardRequest, World } from '../support/world.js';

/** What the suite remembers between the fleet checks. */
export const placed: Record<string, { id: string; hostId: string; containerId: string }> = {};

/** A shard an earlier check placed; a clear failure when that check failed before placing it. */
export function earlier(name: string): { id: string; hostId: string; containerId: string } {
  const shard = placed[name];
  if (shard === undefined)
    throw new Error(`needs shard ${name}, which an earlier check did not place`);
  return shard;
}

const CUDA_ERROR_OUT_OF_MEMORY = 2;

function gpuIndices(shard: ShardView): number[] {
  return shard.gpus
    .filter((g) => g.releasedAt === null)
    .map((g) => g.index)
    .sort((x, y) => x - y);
}

/** Registration, teams and quotas, placement, model constraints, the cap, stop/delete/resize. */
export function fleetChecks(runner: Runner, world: World): void {
  const { system } = world;
  /** "b[1,2]": the host key and the GPU indices of a shard's live reservations. */
  const where = (shard: ShardView) =>
    `${world.keyOf(shard.hostId)}${JSON.stringify(gpuIndices(shard))}`;

  runner.check(
    'fleet: three agents registered over NATS; both control planes see every GPU',
    async () => {
      const expected = {
        // Host a runs an MPS partition: each GPU leaves out the MPS server's memory (the
        // agent's MPS_SERVER_BYTES, docs/agent.md "Capacity").
        a: { model: 'NVIDIA H100 80GB HBM3', count: 2, size: 80 * GiB - 128 * MiB },
        b: { model: 'NVIDIA L4', count: 4, size: 24 * GiB },
        c: { model: 'NVIDIA A100-SXM4-40GB', count: 1, size: 40 * GiB },
      } as const;
      const uuids = new Set<string>();
      for (const n of [1, 2] as const) {
        const { hosts } = await system.admin<{ hosts: { edges: { node: HostView }[] } }>(
          `query { hosts(first: 500) { edges { node { ${HOST_FIELDS} } } } }`,
          {},
          n,
        );
        const mine = hosts.edges.map((e) => e.node).filter((h) => system.hostIds.includes(h.id));
        assert.equal(mine.length, 3, `control plane ${n} lists the three hosts`);
        for (const spec of FLEET) {
          const host = mine.find((h) => h.id === system.hostId(spec.key))!;
          const want = expected[spec.key as keyof typeof expected];
          assert.equal(host.state, 'ONLINE', `host ${spec.key}`);
          assert.equal(host.simulated, true);
          assert.ok(host.lastHeartbeatAt !== null, `host ${spec.key} has heartbeats`);
          const overhead = Number(host.contextOverhead.bytes);
          assert.ok(overhead > 0 && overhead < GiB, `context overhead ${overhead}`);
          assert.equal(host.gpus.length, want.count, `host ${spec.key} GPUs`);
          for (const [i, gpu] of host.gpus.entries()) {
            assert.equal(gpu.index, i);
            assert.equal(gpu.model, want.model);
            assert.equal(gpu.total.bytes, String(want.size));
            assert.equal(gpu.reserved.bytes, '0');
            if (n === 1) uuids.add(gpu.uuid);
          }
        }
      }
      assert.equal(
        uuids.size,
        7,
        'GPU UUIDs are distinct across hosts (the fakes seed them with the host id)',
      );
    },
  );

  runner.check('teams: quotas set by an admin; member tokens act for their team only', async () => {
    await world.createTeam('vision', { maxTotal: '400g', maxShards: 40, maxPerShard: '200g' });
    await world.createTeam('tight', { maxTotal: '20g', maxShards: 2, maxPerShard: '16g' });
    await world.createTeam('burst', { maxTotal: '1t', maxShards: 100, maxPerShard: '8g' });
    const { teams } = await system.as<{ teams: { edges: { node: { name: string } }[] } }>(
      world.team('tight').token,
      `query { teams { edges { node { name } } } }`,
    );
    assert.deepEqual(
      teams.edges.map((e) => e.node.name),
      ['e2e-tight'],
      'a member sees its own team only',
    );
    const error = await expectGraphqlError(() =>
      system.as(world.team('tight').token, `query ($id: ID!) { team(id: $id) { name } }`, {
        id: world.team('vision').id,
      }),
    );
    assert.equal(error.code, 'NOT_FOUND');
  });

  /** The host key and GPU indices a control plane's placementPreview names ("b[1,2]"). */
  const previewWhere = async (request: ShardRequest, n: 1 | 2): Promise<string> => {
    const { placementPreview } = await system.as<{
      placementPreview: { fits: boolean; hostId: string | null; gpuUuids: string[] };
    }>(
      world.team('vision').token,
      `query ($input: PlacementInput!) { placementPreview(input: $input) { fits hostId gpuUuids } }`,
      {
        input: {
          memoryPerGpu: request.memoryPerGpu,
          ...(request.gpuCount !== undefined ? { gpuCount: request.gpuCount } : {}),
          ...(request.placementPolicy ? { placementPolicy: request.placementPolicy } : {}),
          ...(request.gpuModelInclude ? { gpuModelInclude: request.gpuModelInclude } : {}),
          ...(request.gpuModelExclude ? { gpuModelExclude: request.gpuModelExclude } : {}),
        },
      },
      n,
    );
    if (!placementPreview.fits) return 'no fit';
    const indices = placementPreview.gpuUuids.map((uuid) => gpuIndex.get(uuid) ?? -1);
    return `${world.keyOf(placementPreview.hostId)}${JSON.stringify(indices.sort((x, y) => x - y))}`;
  };
  const gpuIndex = new Map<string, number>();

  /**
   * createShard through control plane `n`, expecting it on `expected` ("b[1,2]"). Each control
   * plane places from its own copy of the fleet, read again every second (docs/fleet-and-shards.md),
   * so a change another control plane made may take that long to show: first its preview must
   * name the expected GPUs (within 5 s), then the shard must land there.
   */
  const placedAt = async (
    request: ShardRequest,
    expected: string,
    why: string,
    n: 1 | 2 = 1,
  ): Promise<ShardView & { hostId: string; containerId: string }> => {
    let seen = '';
    try {
      await waitFor(
        `the preview of control plane ${n}`,
        async () => ((seen = await previewWhere(request, n)) === expected ? true : undefined),
        5_000,
        100,
      );
    } catch (error) {
      throw new Error(`${why}: control plane ${n} still previews ${seen}, not ${expected}`, {
        cause: error,
      });
    }
    const shard = await world.runningShard('vision', request, n);
    assert.equal(where(shard), expected, `${why} (control plane ${n}'s preview said ${seen})`);
    return shard;
  };

  runner.check(
    'binpack: the fullest GPU that fits, across hosts (L4 first, then the A100 for 30g, then two L4s)',
    async () => {
      const { gpus } = await system.admin<{
        gpus: { edges: { node: { uuid: string; index: number } }[] };
      }>(`query { gpus(first: 500) { edges { node { uuid index } } } }`);
      for (const { node } of gpus.edges) gpuIndex.set(node.uuid, node.index);
      const s1 = await placedAt(
        { name: 'bin-1', memoryPerGpu: '10g' },
        'b[0]',
        'an empty fleet: the smallest GPUs that fit (L4)',
      );
      const s2 = await placedAt(
        { name: 'bin-2', memoryPerGpu: '10g' },
        'b[0]',
        'the same L4 while it has room',
        2,
      );
      const s3 = await placedAt(
        { name: 'bin-3', memoryPerGpu: '30g' },
        'c[0]',
        'no L4 holds 30g: the A100 (40g) before an H100 (80g)',
      );
      const s4 = await placedAt(
        { name: 'bin-4', memoryPerGpu: '10g', gpuCount: 2 },
        'b[1,2]',
        'two GPUs: the fullest two that fit on one host',
        2,
      );
      assert.equal(s4.gpus.length, 2);
      Object.assign(placed, { s1, s2, s3, s4 });
      // The container sees exactly its GPUs, with its cap per GPU.
      const env: string[] = JSON.parse(docker('inspect', s4.containerId))[0].Config.Env;
      assert.ok(env.includes(`CUDA_DEVICE_MEMORY_LIMIT_0=${s4.limitPerGpu.bytes}`), env.join(' '));
      assert.ok(env.includes(`CUDA_DEVICE_MEMORY_LIMIT_1=${s4.limitPerGpu.bytes}`), env.join(' '));
      assert.ok(
        env.includes(`CUDA_VISIBLE_DEVICES=${s4.gpus.map((g) => g.gpuUuid).join(',')}`),
        env.join(' '),
      );
    },
    120_000,
  );

  runner.check(
    'spread: the emptiest GPUs (the H100s, one after the other, then both)',
    async () => {
      const spread = (name: string, memoryPerGpu: string, gpuCount = 1): ShardRequest => ({
        name,
        memoryPerGpu,
        gpuCount,
        placementPolicy: 'SPREAD',
      });
      const s5 = await placedAt(spread('spread-1', '8g'), 'a[0]', 'the emptiest: an H100');
      const s6 = await placedAt(
        spread('spread-2', '8g'),
        'a[1]',
        'the other H100, now the emptiest',
        2,
      );
      const s7 = await placedAt(spread('spread-3', '4g', 2), 'a[0,1]', 'both H100s');
      Object.assign(placed, { s5, s6, s7 });
    },
  );

  runner.check(
    'model constraints: "H100" include, "L4" exclude, all four L4s, unknown and full models',
    async () => {
      const h100 = await placedAt(
        { name: 'model-h100', memoryPerGpu: '20g', gpuModelInclude: ['H100'] },
        'a[0]',
        'only H100s; binpack takes the first of two equal ones',
        2,
      );
      const notL4 = await placedAt(
        { name: 'model-not-l4', memoryPerGpu: '5g', gpuModelExclude: ['L4'] },
        'c[0]',
        'no L4: the fullest of the rest, the A100',
      );
      const allL4 = await placedAt(
        { name: 'model-all-l4', memoryPerGpu: '2g', gpuCount: 4, gpuModelInclude: ['l4'] },
        'b[0,1,2,3]',
        'case-insensitive, every L4 of host b',
        2,
      );
      for (const gpu of allL4.gpus) assert.equal(gpu.model, 'NVIDIA L4');
      Object.assign(placed, { h100, notL4, allL4 });

      const unknown = await expectGraphqlError(() =>
        world.createShard('vision', {
          name: 'v100',
          memoryPerGpu: '1g',
          gpuModelInclude: ['V100'],
        }),
      );
      assert.equal(unknown.code, 'BAD_USER_INPUT', unknown.message);
      assert.match(unknown.message, /L4/, 'the message lists the fleet models');

      const full = await expectGraphqlError(() =>
        world.createShard('vision', {
          name: 'a100-big',
          memoryPerGpu: '20g',
          gpuModelInclude: ['A100'],
        }),
      );
      assert.equal(full.code, 'NO_CAPACITY', full.message);
      const hosts = full.errors[0]!.extensions!.hosts as { hostId: string; reason: string }[];
      const reason = (key: string) =>
        hosts.find((h) => h.hostId === system.hostId(key))?.reason ?? '';
      assert.match(reason('a'), /model/i, JSON.stringify(hosts));
      assert.match(reason('b'), /model/i, JSON.stringify(hosts));
      assert.match(reason('c'), /free/i, JSON.stringify(hosts));
    },
  );

  runner.check(
    'quotas: QUOTA_EXCEEDED names the limit and both numbers; nothing is written',
    async () => {
      const before = await system.query<{ n: string }>(
        'SELECT count(*)::text AS n FROM shard WHERE team_id = $1',
        [world.team('tight').id],
      );
      const reservedBefore = await system.query<{ sum: string }>(
        'SELECT sum(reserved_bytes)::text AS sum FROM gpu',
      );
      const perShard = await expectGraphqlError(() =>
        world.createShard('tight', { name: 'too-big', memoryPerGpu: '17g' }),
      );
      assert.equal(perShard.code, 'QUOTA_EXCEEDED');
      assert.match(perShard.message, /17 GiB.*> limit 16 GiB per shard/, perShard.message);
      const twoGpus = await expectGraphqlError(() =>
        world.createShard('tight', { name: 'too-big-2', memoryPerGpu: '9g', gpuCount: 2 }),
      );
      assert.match(
        twoGpus.message,
        /2 GPUs × 9 GiB = 18 GiB > limit 16 GiB per shard/,
        twoGpus.message,
      );

      const first = await world.runningShard('tight', { name: 'tight-1', memoryPerGpu: '12g' });
      const memory = await expectGraphqlError(() =>
        world.createShard('tight', { name: 'tight-2', memoryPerGpu: '12g' }, 2),
      );
      assert.equal(memory.code, 'QUOTA_EXCEEDED');
      assert.match(memory.message, /memory/, memory.message);
      assert.match(
        memory.message,
        /12 GiB held \+ 12 GiB requested = 24 GiB > limit 20 GiB/,
        memory.message,
      );

      const second = await world.runningShard('tight', { name: 'tight-2', memoryPerGpu: '4g' });
      const count = await expectGraphqlError(() =>
        world.createShard('tight', { name: 'tight-3', memoryPerGpu: '1g' }),
      );
      assert.equal(count.code, 'QUOTA_EXCEEDED');
      assert.match(count.message, /2 held \+ 1 requested = 3 > limit 2/, count.message);

      const after = await system.query<{ n: string }>(
        'SELECT count(*)::text AS n FROM shard WHERE team_id = $1',
        [world.team('tight').id],
      );
      assert.equal(
        Number(after[0]!.n),
        Number(before[0]!.n) + 2,
        'only the two admitted shards exist',
      );
      const reservedAfter = await system.query<{ sum: string }>(
        'SELECT sum(reserved_bytes)::text AS sum FROM gpu',
      );
      const added = BigInt(first.limitPerGpu.bytes) + BigInt(second.limitPerGpu.bytes);
      assert.equal(BigInt(reservedAfter[0]!.sum), BigInt(reservedBefore[0]!.sum) + added);
      Object.assign(placed, { tight1: first, tight2: second });
    },
  );

  runner.check(
    'cap: a probe filling its shard gets CUDA_ERROR_OUT_OF_MEMORY at the cap (docker logs)',
    async () => {
      const capped = await world.createShard('vision', {
        name: 'fill',
        memoryPerGpu: '1g',
        gpuModelInclude: ['H100'],
        command: ['/e2e-probe', 'fill'],
      });
      const running = await world.waitForState('vision', capped.id, 'RUNNING');
      const report = await waitForProbe(world, running.containerId!);
      const limit = Number(running.limitPerGpu.bytes);
      const overhead = limit - GiB;
      assert.equal(report.refusal, CUDA_ERROR_OUT_OF_MEMORY, JSON.stringify(report));
      assert.equal(report.total, limit, 'CUDA reports the shard size as the total, not 80 GiB');
      assert.equal(report.reached, GiB, 'exactly the request fits beside the context');
      assert.ok(report.free_after! < 64 * MiB, JSON.stringify(report));
      assert.equal(world.allocateIn(running.containerId!, 64 * MiB), CUDA_ERROR_OUT_OF_MEMORY);
      // The heartbeat brings what it holds: the whole cap.
      await world.waitForUsage('vision', running.id, String(limit));
      world.ledger.add({
        id: running.id,
        teamKey: 'vision',
        hostId: running.hostId!,
        state: 'RUNNING',
        containerId: running.containerId!,
        heldBytes: GiB,
      });
      assert.ok(overhead > 0);
      placed.fill = { id: running.id, hostId: running.hostId!, containerId: running.containerId! };
    },
  );

  runner.check(
    'resize: a bigger cap reaches the running container; reservations follow',
    async () => {
      const fill = earlier('fill');
      assert.equal(world.allocateIn(fill.containerId, 512 * MiB), CUDA_ERROR_OUT_OF_MEMORY);
      const before = await world.shard('vision', fill.id);
      const { resizeShard } = await system.as<{
        resizeShard: { limitPerGpu: { bytes: string }; memoryPerGpu: { bytes: string } };
      }>(
        world.team('vision').token,
        `mutation ($id: ID!) { resizeShard(id: $id, memoryPerGpu: "2g") { limitPerGpu { bytes } memoryPerGpu { bytes } } }`,
        { id: fill.id },
        2,
      );
      assert.equal(resizeShard.memoryPerGpu.bytes, String(2 * GiB));
      const grown = BigInt(resizeShard.limitPerGpu.bytes) - BigInt(before.limitPerGpu.bytes);
      assert.equal(grown, BigInt(GiB));
      await poll('the new cap in the container', () =>
        world.allocateIn(fill.containerId, 512 * MiB) === 0 ? true : undefined,
      );
      const rows = await system.query<{ reserved: string; released: boolean }>(
        `SELECT reserved_bytes::text AS reserved, released_at IS NOT NULL AS released
         FROM shard_gpu WHERE shard_id = $1 ORDER BY reserved_at`,
        [fill.id],
      );
      assert.deepEqual(
        rows.map((r) => [r.reserved, r.released]),
        [
          [before.limitPerGpu.bytes, true],
          [resizeShard.limitPerGpu.bytes, false],
        ],
        'the old reservation closed, the new one open',
      );
      // The probe that just allocated has exited: the shard holds what the filler holds.
      await world.converged();
    },
  );

  runner.check(
    'resize below what the shard holds: refused, or the cap and its reservation stay one',
    async () => {
      // Holds 1 GiB (+ its context) of a 1.5 GiB request; asked to shrink to 512 MiB.
      const shard = await world.runningShard('vision', {
        name: 'shrink',
        memoryPerGpu: '1536m',
        gpuModelInclude: ['H100'],
        command: ['/e2e-probe', 'hold', String(GiB)],
      });
      try {
        const used = String(BigInt(shard.limitPerGpu.bytes) - BigInt(512 * MiB));
        await world.waitForUsage('vision', shard.id, used);
        const response = await system.rawAs<{ resizeShard: { limitPerGpu: { bytes: string } } }>(
          world.team('vision').token,
          `mutation ($id: ID!) { resizeShard(id: $id, memoryPerGpu: "512m") { limitPerGpu { bytes } } }`,
          { id: shard.id },
        );
        if (response.errors?.length) {
          const code = response.errors[0]!.extensions?.code;
          assert.ok(code === 'CONFLICT' || code === 'BAD_USER_INPUT', JSON.stringify(response));
          const after = await world.shard('vision', shard.id);
          assert.equal(after.limitPerGpu.bytes, shard.limitPerGpu.bytes, 'the cap is unchanged');
        } else {
          // Accepted: the agent refuses a cap under the usage (BELOW_USAGE), so the
          // reservation must not shrink under what the container holds.
          await sleep(2_500); // a heartbeat and a reconcile
          const problems = (await findProblems(system, world.ledger, world.tokens)).filter((p) =>
            p.includes(shard.id),
          );
          const view = await world.shard('vision', shard.id);
          if (problems.length > 0) world.reportedShards.add(shard.id);
          assert.deepEqual(
            problems,
            [],
            `resizeShard to 512m was accepted (limit now ${view.limitPerGpu.bytes} B, ` +
              `reserved ${view.gpus[0]?.reserved.bytes} B) while the shard uses ${view.gpus[0]?.used.bytes} B`,
          );
        }
      } finally {
        // Whatever happened, this shard must not weigh on the checks after this one.
        await system.as(
          world.team('vision').token,
          `mutation ($id: ID!) { deleteShard(id: $id) { state } }`,
          { id: shard.id },
        );
        world.ledger.set(shard.id, { state: 'DELETED' });
      }
      await world.converged();
    },
  );

  runner.check(
    'stop and delete: STOPPED keeps the exited container, DELETED removes it; both release',
    async () => {
      const fill = earlier('fill');
      const hostBefore = await system.host(world.keyOf(fill.hostId));
      const { stopShard } = await system.as<{ stopShard: { state: string } }>(
        world.team('vision').token,
        `mutation ($id: ID!) { stopShard(id: $id, graceSeconds: 5) { state } }`,
        { id: fill.id },
      );
      assert.equal(stopShard.state, 'STOPPING');
      const stopped = await world.waitForState('vision', fill.id, 'STOPPED');
      assert.equal(stopped.exitCode, 0, 'the probe exits on SIGTERM');
      const [container] = world.containersOf(fill.id);
      assert.ok(container !== undefined && container.state === 'exited', JSON.stringify(container));
      const hostAfter = await system.host(world.keyOf(fill.hostId));
      assert.equal(
        BigInt(hostBefore.memory.reserved.bytes) - BigInt(hostAfter.memory.reserved.bytes),
        BigInt(stopped.limitPerGpu.bytes),
        'the reservation is released',
      );
      world.ledger.set(fill.id, { state: 'STOPPED' });

      const { deleteShard } = await system.as<{ deleteShard: { state: string } }>(
        world.team('vision').token,
        `mutation ($id: ID!) { deleteShard(id: $id) { state } }`,
        { id: fill.id },
      );
      assert.equal(deleteShard.state, 'DELETED');
      world.ledger.set(fill.id, { state: 'DELETED' });
      await poll('the container removed', () =>
        world.containersOf(fill.id).length === 0 ? true : undefined,
      );
      // A running shard deleted at once: its container goes too.
      const s7 = earlier('s7');
      await system.as(
        world.team('vision').token,
        `mutation ($id: ID!) { deleteShard(id: $id) { state } }`,
        {
          id: s7.id,
        },
      );
      world.ledger.set(s7.id, { state: 'DELETED' });
      await poll('the running container removed', () =>
        world.containersOf(s7.id).length === 0 ? true : undefined,
      );
      const again = await world.shard('vision', s7.id, 2);
      assert.equal(again.state, 'DELETED', 'control plane 2 agrees');
      assert.ok(again.gpus.every((g) => g.releasedAt !== null));
      await world.converged();
    },
  );
}

/** Polls every 250 ms for up to 20 s. */
function poll<T>(what: string, probe: () => T | undefined): Promise<T> {
  return waitFor(what, probe, 20_000, 250);
}

function waitForProbe(world: World, containerId: string): Promise<Record<string, number>> {
  return poll('the probe verdict in docker logs', () =>
    world.probeOutput(containerId).find((line) => 'refusal' in line),
  );
}
