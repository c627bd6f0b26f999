import { describe, test } from 'node:test';
import assert from 'node:assert/strict';
import fc from 'fast-check';
import {
  COMPUTE_MODES,
  computeShareFits,
  freeComputePermille,
  FULL_GPU_PERMILLE,
  type ComputeMode,
} from './compute-share.js';
import { gpuUuid, hostId, type Host } from './inventory.js';
import { describeNoFitReason, place } from './placement.js';
import { PlacementIndex } from './placement-index.js';
import { fleetArb, requestArb } from './testing/placement-arbitraries.js';
import { admit } from './queue/admission.js';
import type { PendingShard } from './queue/model.js';
import { bytes, GiB } from './sizes.js';

/** ISOLATED compute shares in place(), the placement index and admit() (issue 17). */

const poolArb = fc.oneof(fc.constant(0), fc.integer({ min: 1, max: 900 }));
const modeArb = fc.constantFrom<ComputeMode>(...COMPUTE_MODES);

/** fleetArb with each GPU's compute (consistent with its host's pool, one pool per host). */
const computeFleetArb: fc.Arbitrary<Host[]> = fleetArb.chain((fleet) =>
  fc
    .array(
      fc.record({
        pool: poolArb,
        isolatedShare: fc.double({ min: 0, max: 1, noNaN: true }),
        othersShare: fc.double({ min: 0, max: 1, noNaN: true }),
      }),
      { minLength: fleet.length, maxLength: fleet.length },
    )
    .map((specs): Host[] =>
      fleet.map((host, h) => {
        const { pool, isolatedShare, othersShare } = specs[h]!;
        return {
          ...host,
          gpus: host.gpus.map((gpu, k) => {
            const isolated = Math.floor(pool * isolatedShare * ((k % 3) / 2));
            const others = Math.floor((1000 - pool) * othersShare * (((k + 1) % 3) / 2));
            return {
              ...gpu,
              isolatedPoolPermille: pool,
              isolatedComputePermille: isolated,
              guaranteedComputePermille: isolated + others,
            };
          }),
        };
      }),
    ),
);

describe('isolated compute: placement', () => {
  test('place() takes a GPU only where the share fits in its mode; the index answers the same', () => {
    fc.assert(
      fc.property(
        computeFleetArb,
        requestArb,
        fc.integer({ min: 1, max: 100 }),
        modeArb,
        (fleet, request, percent, mode) => {
          const asked = { ...request, computeSharePermille: percent * 10, computeMode: mode };
          const result = place(asked, fleet);
          const index = new PlacementIndex();
          index.reset(fleet);
          assert.deepEqual(index.place(asked), result);
          const gpus = new Map(fleet.flatMap((h) => h.gpus).map((g) => [g.uuid as string, g]));
          if (result.kind === 'placed') {
            for (const uuid of result.gpuUuids) {
              const g = gpus.get(uuid)!;
              assert.ok(computeShareFits(g, percent * 10, mode));
              if (mode === 'ISOLATED') {
                assert.ok(g.isolatedComputePermille! + percent * 10 <= g.isolatedPoolPermille!);
              } else {
                assert.ok(
                  g.guaranteedComputePermille! - g.isolatedComputePermille! + percent * 10 <=
                    1000 - g.isolatedPoolPermille!,
                );
              }
            }
          } else {
            for (const { reason } of result.reasons) {
              assert.ok(describeNoFitReason(reason).length > 0);
              if (reason.kind === 'no-isolated-partition') assert.equal(mode, 'ISOLATED');
              if (reason.kind !== 'not-enough-gpus') continue;
              for (const free of reason.gpus) {
                const g = gpus.get(free.uuid)!;
                assert.equal(free.freeComputePermille, freeComputePermille(g, mode));
              }
            }
          }
        },
      ),
      { numRuns: 500 },
    );
  });

  test('ISOLATED on a fleet without a partition: no host fits, and the reasons name the partition', () => {
    const fleet: Host[] = ['a', 'b'].map((name) => ({
      id: hostId(name),
      name,
      state: 'ONLINE',
      labels: {},
      gpus: [
        {
          uuid: gpuUuid(`GPU-${name}`),
          index: 0,
          model: 'NVIDIA H200',
          totalBytes: bytes(141 * GiB),
          reservedBytes: bytes(0),
        },
      ],
    }));
    const result = place(
      {
        bytesPerGpu: bytes(4 * GiB),
        gpuCount: 1,
        computeSharePermille: 300,
        computeMode: 'ISOLATED',
      },
      fleet,
    );
    assert.equal(result.kind, 'no-fit');
    if (result.kind !== 'no-fit') return;
    assert.deepEqual(
      result.reasons.map((r) => r.reason.kind),
      ['no-isolated-partition', 'no-isolated-partition'],
    );
    assert.match(result.message, /with 30% isolated compute each/);
    assert.match(result.message, /a: host runs no isolated \(MPS\) partition/);
    // The same request without the mode fits.
    assert.equal(
      place({ bytesPerGpu: bytes(4 * GiB), gpuCount: 1, computeSharePermille: 300 }, fleet).kind,
      'placed',
    );

    // With a partition that is full, the reason says how much of it is left.
    const full = fleet.map((h) => ({
      ...h,
      gpus: h.gpus.map((g) => ({
        ...g,
        isolatedPoolPermille: 500,
        isolatedComputePermille: 300,
        guaranteedComputePermille: 300,
      })),
    }));
    const refused = place(
      {
        bytesPerGpu: bytes(4 * GiB),
        gpuCount: 1,
        computeSharePermille: 300,
        computeMode: 'ISOLATED',
      },
      full,
    );
    assert.equal(refused.kind, 'no-fit');
    assert.match(
      refused.kind === 'no-fit' ? refused.message : '',
      /and 30% of the isolated partition free each, has 0 \(free: #0 141 GiB with 20% isolated\)/,
    );
  });
});

describe('isolated compute: admission', () => {
  const host = (pool: number, gpus = 1): Host => ({
    id: hostId('h'),
    name: 'h',
    state: 'ONLINE',
    labels: {},
    gpus: Array.from({ length: gpus }, (_, index) => ({
      uuid: gpuUuid(`GPU-h-${index}`),
      index,
      model: 'NVIDIA H200',
      totalBytes: bytes(141 * GiB),
      reservedBytes: bytes(0),
      isolatedPoolPermille: pool,
    })),
  });
  const pending = (n: number, percent: number, mode: ComputeMode): PendingShard => ({
    id: `p-${String(n).padStart(2, '0')}`,
    teamId: 't',
    request: {
      bytesPerGpu: bytes(GiB),
      gpuCount: 1,
      computeSharePermille: percent * 10,
      computeMode: mode,
    },
    priorityRank: 0,
    preemptible: true,
    arrivedAt: n,
  });
  const pass = (fleet: Host[], shards: PendingShard[]) =>
    admit({
      fleet,
      held: [],
      pending: shards,
      teams: [{ id: 't', guarantee: { bytes: bytes(0) }, decayedGiBHours: 0 }],
      now: 1000,
    });

  test("a pass counts the shares it places: the issue's example in one pass", () => {
    const plan = pass(
      [host(500)],
      [
        pending(1, 30, 'ISOLATED'),
        pending(2, 30, 'ISOLATED'),
        pending(3, 60, 'GUARANTEED'),
        pending(4, 40, 'CAPPED'),
      ],
    );
    assert.deepEqual(
      plan.placements.map((p) => p.shardId),
      ['p-01', 'p-04'],
    );
    assert.deepEqual(
      plan.waiting.map((w) => [w.shardId, w.reason.kind]),
      [
        ['p-02', 'capacity'],
        ['p-03', 'capacity'],
      ],
    );
  });

  test('whatever it places in one pass, every GPU stays within its pool, 1000 − pool and 1000', () => {
    fc.assert(
      fc.property(
        poolArb,
        fc.integer({ min: 1, max: 3 }),
        fc.array(fc.tuple(fc.integer({ min: 1, max: 100 }), modeArb), { maxLength: 16 }),
        (pool, gpus, asks) => {
          const plan = pass(
            [host(pool, gpus)],
            asks.map(([percent, mode], n) => pending(n, percent, mode)),
          );
          const sums = new Map<string, { all: number; isolated: number }>();
          for (const placement of plan.placements) {
            const [, percent, mode] = [0, ...asks[Number(placement.shardId.slice(2))]!] as const;
            for (const uuid of placement.placed.gpuUuids) {
              const sum = sums.get(uuid) ?? { all: 0, isolated: 0 };
              sum.all += percent * 10;
              if (mode === 'ISOLATED') sum.isolated += percent * 10;
              sums.set(uuid, sum);
            }
          }
          for (const sum of sums.values()) {
            assert.ok(sum.all <= FULL_GPU_PERMILLE);
            assert.ok(sum.isolated <= pool);
            assert.ok(sum.all - sum.isolated <= FULL_GPU_PERMILLE - pool);
          }
          if (pool === 0) {
            for (const placement of plan.placements) {
              assert.notEqual(asks[Number(placement.shardId.slice(2))]![1], 'ISOLATED');
            }
          }
        },
      ),
    );
  });
});
