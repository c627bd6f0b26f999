import assert from 'node:assert/strict';

import type { HostView, ShardView } from '../support/graphql.js';
import { waitFor } from '../support/processes.js';
import type { Runner } from '../support/runner.js';
import { GiB, MiB } from '../support/system.js';
import type { World } from '../support/world.js';

/** Team A borrows the H100s; team B is guaranteed 24 GiB on them and asks for 20. */
const BORROWER = 'borrower';
const OWNER = 'owner';
const OWNER_ASKS = '20g';
/** Two of A's 10g training shards on one GPU free enough for B's 20g; one does not. */
const TRAINING = 10 * GiB;

interface Held {
  readonly id: string;
  readonly name: string;
  readonly gpu: number;
  readonly containerId: string;
}

/**
 * Reclaim with the real agents and Docker (docs/fleet-and-shards.md, "The queue", rules 4 and
 * 5): team A fills both H100s of host a with borrowed shards (per GPU a build shard and two
 * training shards, the training shards placed one after another); team B, within its
 * guarantee, asks for room that only two training shards on one GPU free. The two youngest
 * training shards go, on the GPU B then takes; A's build and older training shards keep their
 * containers.
 */
export function reclaimChecks(runner: Runner, world: World): void {
  const { system } = world;
  /** A's shards by name, as placed by the first check; the victims are the last two. */
  const borrowed = new Map<string, Held>();

  const liveGpu = (shard: ShardView): number => {
    const live = shard.gpus.filter((g) => g.releasedAt === null);
    assert.equal(live.length, 1, `shard ${shard.name} holds one GPU: ${JSON.stringify(live)}`);
    return live[0]!.index;
  };

  /** Host a's GPUs as control plane 1 sees them: free bytes and the context overhead. */
  const hostA = async (): Promise<{ free: number[]; overhead: number }> => {
    const host: HostView = await system.host('a');
    return {
      free: host.gpus.map((g) => Number(g.free.bytes)),
      overhead: Number(host.contextOverhead.bytes),
    };
  };

  /** A's shard on host a's H100s, RUNNING, in the ledger. */
  const borrow = async (name: string, bytes: number, priorityClass: string): Promise<Held> => {
    const shard = await world.runningShard(BORROWER, {
      name,
      memoryPerGpu: `${Math.floor(bytes / MiB)}m`,
      gpuModelInclude: ['H100'],
      priorityClass,
    });
    assert.equal(shard.hostId, system.hostId('a'), `${name} on host a`);
    const held = { id: shard.id, name, gpu: liveGpu(shard), containerId: shard.containerId };
    borrowed.set(name, held);
    return held;
  };

  const victims = () => [borrowed.get('train-1b')!, borrowed.get('train-1a')!];

  /**
   * B asks through control plane `n`; if that one dies before it answers (it may be the one
   * that reclaims, at once), the same key through the other answers the same shard.
   */
  const ownerCreates = async (name: string, n: 1 | 2): Promise<ShardView> => {
    const request = {
      name,
      memoryPerGpu: OWNER_ASKS,
      gpuModelInclude: ['H100'],
      queue: true,
      idempotencyKey: `${system.runId}-${name}`,
    };
    let shard: ShardView;
    try {
      shard = await world.createShard(OWNER, request, n);
    } catch (error) {
      if (system.controlPlane(n).process.running) throw error;
      shard = await world.createShard(OWNER, request, n === 1 ? 2 : 1);
    }
    // Host a is full: B waits, within its guarantee, and the queue reclaims for it.
    assert.equal(shard.state, 'PENDING', `${name}: ${JSON.stringify(shard)}`);
    return shard;
  };

  /** Victims reclaimed for `forShard`: PENDING, no container, the reason naming it. */
  const assertRequeued = async (forShard: string, n: 1 | 2 = 1): Promise<void> => {
    for (const victim of victims()) {
      const shard = await world.waitForState(BORROWER, victim.id, 'PENDING', 45_000, n);
      assert.match(shard.failureReason ?? '', /^reclaimed: /, `${victim.name}'s reason`);
      assert.ok(shard.failureReason!.includes(forShard), shard.failureReason!);
      // The agent removes the exited container of a shard that waits (its next reconcile).
      await waitFor(
        `${victim.name}'s container removed`,
        () => (world.containersOf(victim.id).length === 0 ? true : undefined),
        30_000,
        250,
      );
      world.ledger.set(victim.id, { state: 'PENDING', hostId: shard.hostId ?? '' });
      delete world.ledger.shards.get(victim.id)!.containerId;
    }
  };

  /** B's shard RUNNING on the GPU the victims held, its one container on host a. */
  const assertOwnerRuns = async (id: string, n: 1 | 2 = 1): Promise<ShardView> => {
    const running = await world.waitForState(OWNER, id, 'RUNNING', 45_000, n);
    assert.equal(running.hostId, system.hostId('a'));
    assert.equal(liveGpu(running), victims()[0]!.gpu, 'on the GPU its victims freed');
    assert.deepEqual(
      world.containersOf(id).map((c) => [c.id, c.state]),
      [[running.containerId, 'running']],
    );
    return running;
  };

  /** B's shard stopped: A's victims are placed again on the room it frees, in new containers. */
  const ownerStopsAndVictimsReturn = async (id: string): Promise<void> => {
    await system.as(
      world.team(OWNER).token,
      `mutation ($id: ID!) { stopShard(id: $id, graceSeconds: 2) { state } }`,
      { id },
    );
    await world.waitForState(OWNER, id, 'STOPPED');
    world.ledger.add({ id, teamKey: OWNER, hostId: system.hostId('a'), state: 'STOPPED' });
    for (const victim of victims()) {
      const back = await world.waitForState(BORROWER, victim.id, 'RUNNING', 45_000);
      assert.equal(back.hostId, system.hostId('a'));
      assert.equal(liveGpu(back), victim.gpu, `${victim.name} back on its GPU`);
      assert.notEqual(back.containerId, victim.containerId, 'a new container');
      world.track(BORROWER, back);
      borrowed.set(victim.name, { ...victim, containerId: back.containerId! });
    }
  };

  runner.check(
    "reclaim: A fills the H100s with borrowed shards; B asks within its guarantee; A's two youngest training shards are stopped (containers gone) and PENDING, B runs; B stops, A's run again",
    async () => {
      await world.createTeam(BORROWER, { maxTotal: '1t', maxShards: 20, maxPerShard: '80g' });
      await world.createTeam(OWNER, {
        maxTotal: '24g',
        maxShards: 4,
        maxPerShard: '24g',
        guarantee: '24g',
        guaranteeGpuModel: 'H100',
      });
      // Per GPU, fullest first: a build shard that leaves room for exactly two training
      // shards, then the two (binpack puts each on the fullest GPU that fits: this one).
      for (const round of [0, 1]) {
        const { free, overhead } = await hostA();
        const taken = new Set([...borrowed.values()].map((s) => s.gpu));
        const gpu = free
          .map((bytes, index) => ({ bytes, index }))
          .filter((g) => !taken.has(g.index))
          .sort((x, y) => x.bytes - y.bytes)[0]!;
        const room = 2 * (TRAINING + overhead);
        const build = gpu.bytes - room - overhead;
        assert.ok(build >= GiB, `H100 ${gpu.index} has ${gpu.bytes} B free: too little to fill`);
        const filler = await borrow(`build-${round}`, build, 'build');
        const older = await borrow(`train-${round}a`, TRAINING, 'training');
        const younger = await borrow(`train-${round}b`, TRAINING, 'training');
        assert.deepEqual(
          [older.gpu, younger.gpu],
          [filler.gpu, filler.gpu],
          'the training shards fill the GPU the build shard left room on',
        );
      }
      const { free, overhead } = await hostA();
      for (const bytes of free) assert.ok(bytes < TRAINING + overhead, `H100s full: ${free}`);

      const first = await ownerCreates('guaranteed-1', 1);
      await assertRequeued(first.id);
      await assertOwnerRuns(first.id);
      const running = await world.shard(OWNER, first.id);
      world.track(OWNER, running);
      // Nobody else was touched: A's build and older training shards keep their containers.
      await world.converged();
      // In the queue with a position, as control plane 1's last pass saw them.
      for (const victim of victims()) {
        const waiting = await waitFor(
          `${victim.name}'s queue position`,
          async () => {
            const view = await queueView(world, victim.id);
            return view.queuePosition !== null ? view : undefined;
          },
          15_000,
          250,
        );
        assert.equal(waiting.state, 'PENDING');
        assert.ok(waiting.queuePosition! >= 1, JSON.stringify(waiting));
      }

      await ownerStopsAndVictimsReturn(first.id);
      await world.converged();
    },
    180_000,
  );

  runner.check(
    'reclaim: the control plane that committed a reclaim killed -9 at once: the other finishes it; no shard lost or doubled, reservations match',
    async () => {
      if (borrowed.size !== 6) throw new Error('needs the borrowed shards of the check before');
      const counters = async () =>
        Promise.all([1, 2].map((n) => preemptions(world, n as 1 | 2, BORROWER)));
      const before = await counters();
      // The decision is known to its process first: its preemption counter rises after the
      // commit (and after the stop commands were handed to NATS). Whoever shows it is killed.
      let killed: 1 | 2 | undefined;
      let stopped = false;
      const watcher = waitFor<1 | 2 | 0>(
        'a control plane counting the preemption',
        async () => {
          if (stopped) return 0;
          const now = await counters();
          return now[0]! > before[0]! ? 1 : now[1]! > before[1]! ? 2 : undefined;
        },
        45_000,
        5,
      ).then(async (n) => {
        if (n === 0) return;
        killed = n;
        await system.controlPlane(n).process.kill9();
      });
      let second: ShardView;
      try {
        // Through control plane 2 (the first reclaim went through 1): the one asked usually
        // decides, since its commit signals its own queue.
        second = await ownerCreates('guaranteed-2', 2);
        await watcher;
      } finally {
        stopped = true;
        await watcher.catch(() => undefined);
      }
      assert.ok(killed !== undefined);
      const survivor = killed === 1 ? 2 : 1;

      // The survivor alone finishes: the victims stop and wait again, B's shard runs.
      await assertRequeued(second.id, survivor);
      await assertOwnerRuns(second.id, survivor);
      assert.equal(system.controlPlane(killed).process.running, false, 'still down');
      assert.equal(
        await preemptions(world, survivor, BORROWER),
        before[survivor - 1],
        'the survivor reclaimed nothing more (no second reclaim for the same shard)',
      );
      const rows = await system.query<{ name: string; state: string }>(
        `SELECT name, state::text AS state FROM shard
          WHERE team_id = ANY($1::uuid[]) AND state <> 'STOPPED' ORDER BY name`,
        [[world.team(BORROWER).id, world.team(OWNER).id]],
      );
      assert.deepEqual(
        rows.map((r) => `${r.name} ${r.state}`),
        [
          'build-0 RUNNING',
          'build-1 RUNNING',
          'guaranteed-2 RUNNING',
          'train-0a RUNNING',
          'train-0b RUNNING',
          'train-1a PENDING',
          'train-1b PENDING',
        ],
        'every shard there, once, in its state',
      );
      const [reservations] = await system.query<{ off: string }>(
        `SELECT count(*)::text AS off FROM gpu g
          WHERE g.reserved_bytes <> (SELECT coalesce(sum(sg.reserved_bytes), 0) FROM shard_gpu sg
                                      JOIN shard s ON s.id = sg.shard_id
                                     WHERE sg.gpu_uuid = g.uuid AND sg.released_at IS NULL
                                       AND s.state IN ('PLACED', 'STARTING', 'RUNNING', 'STOPPING'))`,
      );
      assert.equal(reservations!.off, '0', 'every GPU reserves exactly what its live shards hold');
      const owner = await world.shard(OWNER, second.id, survivor);
      world.track(OWNER, owner);
      console.log(
        `     (control plane ${killed} committed the reclaim and was killed; ${survivor} finished it)`,
      );
      await system.restartControlPlane(killed);
      await world.converged();

      await ownerStopsAndVictimsReturn(second.id);
      await world.converged();
      // Later checks get the H100s back.
      for (const [key, ids] of [
        [BORROWER, [...borrowed.values()].map((s) => s.id)],
        [OWNER, [second.id]],
      ] as const) {
        for (const id of ids) {
          await system.as(
            world.team(key).token,
            `mutation ($id: ID!) { deleteShard(id: $id) { state } }`,
            { id },
          );
          world.ledger.set(id, { state: 'DELETED' });
        }
      }
      await world.converged();
    },
    240_000,
  );
}

/** gpushards_preemptions_total of a team on control plane `n` (0 before its first). */
async function preemptions(world: World, n: 1 | 2, teamKey: string): Promise<number> {
  const metrics = await world.system.metrics(n);
  const value = new RegExp(
    `^gpushards_preemptions_total\\{team="e2e-${teamKey}"\\} (\\d+)$`,
    'm',
  ).exec(metrics)?.[1];
  return Number(value ?? 0);
}

async function queueView(
  world: World,
  id: string,
): Promise<{ state: string; queuePosition: number | null; queueReason: string | null }> {
  const { shard } = await world.system.as<{
    shard: { state: string; queuePosition: number | null; queueReason: string | null };
  }>(
    world.team(BORROWER).token,
    `query ($id: ID!) { shard(id: $id) { state queuePosition queueReason } }`,
    { id },
  );
  return shard;
}
