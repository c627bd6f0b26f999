import assert from 'node:assert/strict';
import { randomUUID } from 'node:crypto';
import { after, before, describe, it } from 'node:test';
import {
  bytes,
  canReserve,
  computeShareFits,
  gpuUuid,
  hostId,
  type ComputeMode,
} from '@gpushards/limits';
import fc from 'fast-check';
import type { Caller } from '../auth/caller.js';
import {
  createTestDatabase,
  startPostgres,
  TEST_DATABASE_KINDS,
  type PostgresServer,
  type TestDatabase,
} from '../testing/index.js';
import { writeBatch, type BatchWritten, type PlannedShard } from './create-statements.js';
import { checkCreateShardInput } from './shard-input.js';

/**
 * createShard's batch statement (`writeBatch`) against real databases: on each GPU the batch's
 * shards there take the longest prefix (in batch order) that still fits when the statement
 * runs, a shard is written only where it was taken on all its GPUs, and each GPU's counts rise
 * by exactly the shards written on it.
 */

const GiB = 2 ** 30;
const GPU_BYTES = 20 * GiB;
const HOSTS = ['h-0', 'h-1'];
const GPUS = HOSTS.flatMap((host) => [0, 1].map((index) => `GPU-${host}-${index}`));
const hostOf = (uuid: string) => uuid.slice('GPU-'.length, -'-0'.length);

let postgres: PostgresServer | undefined;
before(async () => {
  postgres = await startPostgres();
});
after(async () => {
  await postgres?.stop();
});

/** A shard to plan: its cap on each GPU and its compute share. */
interface ShardSpec {
  readonly gpus: readonly string[];
  readonly gib: number;
  readonly permille: number;
  readonly mode: ComputeMode;
}

/** What a GPU holds before the batch. */
interface GpuState {
  readonly reservedGib: number;
  readonly unownedGib: number;
  readonly pool: number;
  readonly guaranteed: number;
  readonly isolated: number;
}

const EMPTY: GpuState = { reservedGib: 0, unownedGib: 0, pool: 0, guaranteed: 0, isolated: 0 };

for (const kind of TEST_DATABASE_KINDS) {
  describe(`createShard's batch statement on ${kind}`, () => {
    let db: TestDatabase;
    let teamId: string;

    before(async () => {
      db = await createTestDatabase(kind, postgres ? { server: postgres } : {});
      teamId = randomUUID();
      await db.prisma.$executeRaw`INSERT INTO team (id, name) VALUES (${teamId}::uuid, 'batch')`;
      for (const host of HOSTS) {
        await db.prisma.$executeRaw`
          INSERT INTO host (id, name, labels, context_overhead_bytes, updated_at)
          VALUES (${host}, ${host}, '{}', 0, now())`;
      }
      for (const uuid of GPUS) {
        await db.prisma.$executeRaw`
          INSERT INTO gpu (uuid, host_id, index, model, total_bytes, updated_at)
          VALUES (${uuid}, ${hostOf(uuid)}, ${Number(uuid.at(-1))}, 'NVIDIA A100', ${GPU_BYTES},
                  now())`;
      }
    });
    after(async () => {
      await db?.cleanup();
    });

    /** Empties the fleet and sets each GPU's counts; every host ONLINE unless `offline`. */
    async function reset(states: ReadonlyMap<string, GpuState>, offline: readonly string[] = []) {
      await db.prisma.$executeRaw`DELETE FROM shard_gpu`;
      await db.prisma.$executeRaw`DELETE FROM shard_event`;
      await db.prisma.$executeRaw`DELETE FROM shard`;
      for (const uuid of GPUS) {
        const s = states.get(uuid) ?? EMPTY;
        await db.prisma.$executeRaw`
          UPDATE gpu SET reserved_bytes = ${s.reservedGib * GiB},
                         unattributed_bytes = ${s.unownedGib * GiB},
                         isolated_pool_permille = ${s.pool},
                         guaranteed_compute_permille = ${s.guaranteed},
                         isolated_compute_permille = ${s.isolated}
           WHERE uuid = ${uuid}`;
      }
      for (const host of HOSTS) {
        const state = offline.includes(host) ? 'CORDONED' : 'ONLINE';
        await db.prisma.$executeRaw`
          UPDATE host SET state = ${state}::host_state WHERE id = ${host}`;
      }
    }

    function planned(specs: readonly ShardSpec[]): PlannedShard[] {
      return specs.map((spec, i) => ({
        shardId: randomUUID(),
        auditId: randomUUID(),
        caller: { tokenId: randomUUID(), tokenName: 't', role: 'MEMBER', teamId } as Caller,
        teamId,
        request: checkCreateShardInput({
          name: `s-${i}`,
          image: 'example/train:1',
          memoryPerGpu: `${spec.gib}g`,
          gpuCount: spec.gpus.length,
          ...(spec.permille > 0
            ? { computeSharePercent: spec.permille / 10, computeMode: spec.mode }
            : {}),
        } as Parameters<typeof checkCreateShardInput>[0]),
        placed: {
          kind: 'placed',
          hostId: hostId(hostOf(spec.gpus[0]!)),
          gpuUuids: spec.gpus.map(gpuUuid),
          bytesPerGpu: bytes(spec.gib * GiB),
          reservedBytesPerGpu: bytes(spec.gib * GiB),
        },
      }));
    }

    async function write(shards: readonly PlannedShard[]): Promise<BatchWritten> {
      return db.prisma.direct.transaction((tx) => writeBatch(tx, shards));
    }

    /** Each GPU's reserved bytes and compute, and the sum its reservations account for. */
    async function gpuCounts() {
      return db.prisma.$queryRaw<
        {
          uuid: string;
          reserved: number;
          guaranteed: number;
          isolated: number;
          reservations: number;
        }[]
      >`
        SELECT gpu.uuid, gpu.reserved_bytes::float8 AS reserved,
               gpu.guaranteed_compute_permille AS guaranteed,
               gpu.isolated_compute_permille AS isolated,
               coalesce((SELECT sum(reserved_bytes) FROM shard_gpu
                          WHERE shard_gpu.gpu_uuid = gpu.uuid), 0)::float8 AS reservations
          FROM gpu ORDER BY uuid`;
    }

    it('two batches on one GPU with room for part of the second place that part', async () => {
      await reset(new Map());
      const shard: ShardSpec = { gpus: [GPUS[0]!], gib: 4, permille: 0, mode: 'GUARANTEED' };
      // The GPU takes five. The second batch was planned without the first (another control
      // plane's): two of its three still fit, in its order.
      const first = await write(planned([shard, shard, shard]));
      assert.equal(first.shards.size, 3);
      const second = planned([shard, shard, shard]);
      const written = await write(second);
      assert.deepEqual(
        [...written.shards.keys()].sort(),
        [second[0]!.shardId, second[1]!.shardId].sort(),
        'the first two of the second batch are written, the third left out',
      );
      assert.deepEqual(
        written.gpus.find((gpu) => gpu.uuid === GPUS[0])?.reservedBytes,
        12 * GiB,
        'the statement says what the GPU held when it ran',
      );
      assert.deepEqual(written.unschedulableHostIds, []);
      const counts = (await gpuCounts()).find((gpu) => gpu.uuid === GPUS[0])!;
      assert.equal(counts.reserved, 20 * GiB);
      assert.equal(counts.reservations, 20 * GiB);
    });

    it('a multi-GPU shard left out on one GPU takes nothing on the others', async () => {
      await reset(
        new Map([
          [GPUS[0]!, { ...EMPTY, reservedGib: 4 }],
          [GPUS[1]!, { ...EMPTY, reservedGib: 18 }],
        ]),
      );
      const both: ShardSpec = {
        gpus: [GPUS[0]!, GPUS[1]!],
        gib: 4,
        permille: 0,
        mode: 'GUARANTEED',
      };
      const one: ShardSpec = { gpus: [GPUS[0]!], gib: 8, permille: 0, mode: 'GUARANTEED' };
      const batch = planned([both, one, one]);
      const written = await write(batch);
      // GPU 0's prefix is the two-GPU shard and the first 8 GiB one (4 + 4 + 8 of 20 GiB; the
      // second would make 24); GPU 1 has no room for the two-GPU shard, so it is left out and
      // GPU 0 gets only the 8 GiB shard written.
      assert.deepEqual([...written.shards.keys()], [batch[1]!.shardId]);
      const counts = await gpuCounts();
      assert.equal(counts.find((gpu) => gpu.uuid === GPUS[0])?.reserved, 12 * GiB);
      assert.equal(counts.find((gpu) => gpu.uuid === GPUS[1])?.reserved, 18 * GiB);
    });

    it('a host no longer ONLINE takes nothing and is named', async () => {
      await reset(new Map(), [HOSTS[1]!]);
      const batch = planned([
        { gpus: [GPUS[2]!], gib: 1, permille: 0, mode: 'GUARANTEED' },
        { gpus: [GPUS[0]!], gib: 1, permille: 0, mode: 'GUARANTEED' },
      ]);
      const written = await write(batch);
      assert.deepEqual([...written.shards.keys()], [batch[1]!.shardId]);
      assert.deepEqual(written.unschedulableHostIds, [HOSTS[1]]);
      assert.equal((await gpuCounts()).find((gpu) => gpu.uuid === GPUS[2])?.reserved, 0);
    });

    it('writes what placing the batch one shard at a time in its order would (libs/limits rules)', async () => {
      const gpuState: fc.Arbitrary<GpuState> = fc
        .record({
          reservedGib: fc.integer({ min: 0, max: 20 }),
          unownedGib: fc.integer({ min: 0, max: 4 }),
          pool: fc.constantFrom(0, 0, 300, 500),
          guaranteed: fc.integer({ min: 0, max: 900 }),
        })
        .map((s) => ({ ...s, isolated: Math.min(s.pool, Math.floor(s.guaranteed / 2)) }));
      const shard: fc.Arbitrary<ShardSpec> = fc
        .record({
          host: fc.nat(HOSTS.length - 1),
          gpus: fc.constantFrom([0], [1], [0, 1]),
          gib: fc.integer({ min: 1, max: 12 }),
          permille: fc.constantFrom(0, 0, 100, 250, 400),
          isolated: fc.boolean(),
        })
        .map(({ host, gpus, gib, permille, isolated }) => ({
          gpus: gpus.map((index) => `GPU-${HOSTS[host]}-${index}`),
          gib,
          permille,
          mode: isolated && permille > 0 ? ('ISOLATED' as const) : ('GUARANTEED' as const),
        }));
      await fc.assert(
        fc.asyncProperty(
          fc.array(gpuState, { minLength: GPUS.length, maxLength: GPUS.length }),
          fc.array(shard, { minLength: 1, maxLength: 12 }),
          fc.subarray(HOSTS, { maxLength: 1 }),
          async (states, specs, offline) => {
            const held = new Map(GPUS.map((uuid, i) => [uuid, states[i]!]));
            await reset(held, offline);
            const batch = planned(specs);
            const written = await write(batch);
            const expected = oneAtATime(held, specs, offline);
            assert.deepEqual(
              batch.flatMap((s, i) => (written.shards.has(s.shardId) ? [i] : [])),
              expected.written,
            );
            const counts = await gpuCounts();
            for (const gpu of counts) {
              const want = expected.after.get(gpu.uuid)!;
              assert.equal(gpu.reserved, want.reservedGib * GiB, gpu.uuid);
              assert.equal(gpu.guaranteed, want.guaranteed, gpu.uuid);
              assert.equal(gpu.isolated, want.isolated, gpu.uuid);
              const was = held.get(gpu.uuid)!.reservedGib * GiB;
              assert.equal(gpu.reserved - was, gpu.reservations, `${gpu.uuid}: no leak`);
            }
            assert.deepEqual(
              written.gpus.map((gpu) => [gpu.uuid, gpu.reservedBytes]).sort(),
              GPUS.filter((uuid) => specs.some((s) => s.gpus.includes(uuid))).map((uuid) => [
                uuid,
                held.get(uuid)!.reservedGib * GiB,
              ]),
              'the statement says what each GPU held when it ran',
            );
          },
        ),
        { numRuns: kind === 'postgres' ? 60 : 30 },
      );
    });
  });
}

/**
 * The model: on each GPU the batch's shards there, in order, are taken while each fits on top
 * of those taken before it (libs/limits canReserve and computeShareFits); the first that does
 * not ends the GPU's prefix. A shard is written when taken on all its GPUs; each GPU then holds
 * what it held plus the shards written on it.
 */
function oneAtATime(
  before: ReadonlyMap<string, GpuState>,
  specs: readonly ShardSpec[],
  offline: readonly string[],
): { written: number[]; after: Map<string, GpuState> } {
  const taken = new Set<string>();
  for (const uuid of GPUS) {
    if (offline.includes(hostOf(uuid))) continue;
    const s = { ...before.get(uuid)! };
    for (const [i, spec] of specs.entries()) {
      if (!spec.gpus.includes(uuid)) continue;
      const memory = canReserve(
        {
          totalBytes: bytes(GPU_BYTES),
          reservedBytes: bytes(s.reservedGib * GiB),
          unownedBytes: bytes(s.unownedGib * GiB),
        } as Parameters<typeof canReserve>[0],
        bytes(spec.gib * GiB),
        1,
      );
      const compute = computeShareFits(
        {
          guaranteedComputePermille: s.guaranteed,
          isolatedComputePermille: s.isolated,
          isolatedPoolPermille: s.pool,
        },
        spec.permille,
        spec.mode,
      );
      if (!memory || !compute) break;
      s.reservedGib += spec.gib;
      s.guaranteed += spec.permille;
      if (spec.mode === 'ISOLATED') s.isolated += spec.permille;
      taken.add(`${i}/${uuid}`);
    }
  }
  const written = specs.flatMap((spec, i) =>
    spec.gpus.every((uuid) => taken.has(`${i}/${uuid}`)) ? [i] : [],
  );
  const after = new Map([...before].map(([uuid, s]) => [uuid, { ...s }]));
  for (const i of written) {
    const spec = specs[i]!;
    for (const uuid of spec.gpus) {
      const s = after.get(uuid)!;
      s.reservedGib += spec.gib;
      s.guaranteed += spec.permille;
      if (spec.mode === 'ISOLATED') s.isolated += spec.permille;
    }
  }
  return { written, after };
}
