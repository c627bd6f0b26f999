import { describe, test } from 'node:test';
import assert from 'node:assert/strict';
import fc from 'fast-check';
import {
  COMPUTE_MODES,
  computeShareFits,
  describeComputeRefusal,
  freeComputePermille,
  FULL_GPU_PERMILLE,
  isolatedShareChangeRefusal,
  resizeComputeShare,
  resolveComputeShare,
  type ComputeMode,
  type GpuComputeLoad,
} from './compute-share.js';

/** The isolated compute mode (issue 17): an MPS partition of P permille per GPU of a host; placement in isolated-placement.test.ts. */

const poolArb = fc.oneof(fc.constant(0), fc.integer({ min: 1, max: 900 }));
const modeArb = fc.constantFrom<ComputeMode>(...COMPUTE_MODES);
const shareArb = fc.integer({ min: 0, max: 1000 });

/**
 * A GPU's compute as the database can hold it: isolated ≤ guaranteed ≤ 1000, any pool 0..900,
 * so also a pool that grew or shrank under running shards.
 */
const loadArb: fc.Arbitrary<Required<GpuComputeLoad>> = fc
  .record({
    a: fc.integer({ min: 0, max: 1000 }),
    b: fc.integer({ min: 0, max: 1000 }),
    pool: poolArb,
  })
  .map(({ a, b, pool }) => ({
    guaranteedComputePermille: Math.max(a, b),
    isolatedComputePermille: Math.min(a, b),
    isolatedPoolPermille: pool,
  }));

/** A GPU's compute with the pool respected, as placement keeps it while P does not change. */
const consistentLoadArb: fc.Arbitrary<Required<GpuComputeLoad>> = poolArb.chain((pool) =>
  fc
    .record({
      isolated: fc.integer({ min: 0, max: pool }),
      others: fc.integer({ min: 0, max: FULL_GPU_PERMILLE - pool }),
    })
    .map(({ isolated, others }) => ({
      guaranteedComputePermille: isolated + others,
      isolatedComputePermille: isolated,
      isolatedPoolPermille: pool,
    })),
);

function after(load: Required<GpuComputeLoad>, share: number, mode: ComputeMode) {
  return {
    ...load,
    guaranteedComputePermille: load.guaranteedComputePermille + share,
    isolatedComputePermille: load.isolatedComputePermille + (mode === 'ISOLATED' ? share : 0),
  };
}

describe('isolated compute: the request', () => {
  test('ISOLATED needs a share; with one it is stored as permille', () => {
    const none = resolveComputeShare({ mode: 'ISOLATED' });
    assert.equal(!none.ok && none.refusal.kind, 'isolated-without-share');
    assert.match(describeComputeRefusal(!none.ok ? none.refusal : (undefined as never)), /share/);
    assert.deepEqual(resolveComputeShare({ mode: 'ISOLATED', sharePercent: 30 }), {
      ok: true,
      value: { sharePermille: 300, mode: 'ISOLATED' },
    });
  });
});

describe('isolated compute: the fit rule', () => {
  test('exactly the rule: ISOLATED within the pool, the rest within 1000 − pool', () => {
    fc.assert(
      fc.property(consistentLoadArb, shareArb, modeArb, (load, share, mode) => {
        const g = load.guaranteedComputePermille;
        const i = load.isolatedComputePermille;
        const p = load.isolatedPoolPermille;
        const expected =
          mode === 'ISOLATED' ? p > 0 && i + share <= p : share === 0 || g - i + share <= 1000 - p;
        assert.equal(computeShareFits(load, share, mode), expected);
        assert.equal(
          freeComputePermille(load, mode) >= share && (mode !== 'ISOLATED' || p > 0),
          expected || (mode !== 'ISOLATED' && share === 0),
        );
      }),
      { numRuns: 2000 },
    );
  });

  test('whatever the state (a pool changed under running shards), a fitting share keeps all shares ≤ 1000', () => {
    fc.assert(
      fc.property(loadArb, shareArb, modeArb, (load, share, mode) => {
        if (!computeShareFits(load, share, mode)) return;
        const next = after(load, share, mode);
        assert.ok(next.guaranteedComputePermille <= FULL_GPU_PERMILLE);
        if (mode === 'ISOLATED') {
          assert.ok(load.isolatedPoolPermille > 0);
          assert.ok(next.isolatedComputePermille <= load.isolatedPoolPermille);
        } else if (share > 0) {
          assert.ok(
            next.guaranteedComputePermille - next.isolatedComputePermille <=
              FULL_GPU_PERMILLE - load.isolatedPoolPermille,
          );
        }
      }),
      { numRuns: 2000 },
    );
  });

  test('shares placed one after another never pass the pool, 1000 − pool, or 1000', () => {
    fc.assert(
      fc.property(
        poolArb,
        fc.array(fc.tuple(fc.integer({ min: 1, max: 100 }), modeArb), { maxLength: 40 }),
        (pool, asks) => {
          let load = {
            guaranteedComputePermille: 0,
            isolatedComputePermille: 0,
            isolatedPoolPermille: pool,
          };
          for (const [percent, mode] of asks) {
            const fits = computeShareFits(load, percent * 10, mode);
            if (pool === 0 && mode === 'ISOLATED') assert.equal(fits, false);
            if (fits) load = after(load, percent * 10, mode);
            assert.ok(load.isolatedComputePermille <= pool);
            assert.ok(load.guaranteedComputePermille - load.isolatedComputePermille <= 1000 - pool);
            assert.ok(load.guaranteedComputePermille <= FULL_GPU_PERMILLE);
          }
        },
      ),
    );
  });

  test('the example of the issue: P = 50%, ISOLATED 30 fits, 30 more does not, GUARANTEED 60 does not, 40 does', () => {
    let load = {
      guaranteedComputePermille: 0,
      isolatedComputePermille: 0,
      isolatedPoolPermille: 500,
    };
    assert.ok(computeShareFits(load, 300, 'ISOLATED'));
    load = after(load, 300, 'ISOLATED');
    assert.ok(!computeShareFits(load, 300, 'ISOLATED'));
    assert.ok(!computeShareFits(load, 600, 'GUARANTEED'));
    assert.ok(!computeShareFits(load, 600, 'CAPPED'));
    assert.ok(computeShareFits(load, 400, 'GUARANTEED'));
    assert.ok(computeShareFits(load, 200, 'ISOLATED'));
    assert.equal(freeComputePermille(load, 'ISOLATED'), 200);
    assert.equal(freeComputePermille(load, 'GUARANTEED'), 500);
  });
});

describe('isolated compute: a running shard', () => {
  test("an isolated shard's share and mode are fixed, and no running shard becomes isolated", () => {
    fc.assert(
      fc.property(
        fc.record({ sharePermille: shareArb, mode: modeArb }),
        fc.record({ sharePermille: shareArb, mode: modeArb }),
        (from, to) => {
          const refusal = isolatedShareChangeRefusal(from, to);
          const same = from.mode === to.mode && from.sharePermille === to.sharePermille;
          const involved = from.mode === 'ISOLATED' || to.mode === 'ISOLATED';
          assert.equal(refusal !== undefined, involved && !same);
          if (refusal !== undefined) {
            assert.equal(refusal.kind, 'isolated-share-fixed');
            assert.match(describeComputeRefusal(refusal), /fixed while it/);
            assert.match(describeComputeRefusal(refusal), /stop it and start it/);
          }
        },
      ),
    );
  });

  test('resizeComputeShare refuses changing an isolated shard, and bounds the others by 1000 − pool', () => {
    const gpus = [
      {
        gpuUuid: 'GPU-0',
        othersPermille: 300,
        othersIsolatedPermille: 300,
        isolatedPoolPermille: 500,
      },
    ];
    const current = { sharePermille: 200, mode: 'ISOLATED' as const };
    const grow = resizeComputeShare({ sharePercent: 20 + 5, mode: 'ISOLATED' }, {}, gpus, current);
    assert.equal(!grow.ok && grow.refusal.kind, 'isolated-share-fixed');
    const toGuaranteed = resizeComputeShare({ sharePercent: 20 }, {}, gpus, current);
    assert.equal(!toGuaranteed.ok && toGuaranteed.refusal.kind, 'isolated-share-fixed');
    const becomes = resizeComputeShare({ sharePercent: 10, mode: 'ISOLATED' }, {}, gpus, {
      sharePermille: 100,
      mode: 'GUARANTEED',
    });
    assert.equal(!becomes.ok && becomes.refusal.kind, 'isolated-share-fixed');

    // A GUARANTEED shard beside a 50% partition holding 30%: at most 50% for the rest.
    const beside = [
      {
        gpuUuid: 'GPU-0',
        othersPermille: 300,
        othersIsolatedPermille: 300,
        isolatedPoolPermille: 500,
      },
    ];
    const guaranteed = { sharePermille: 100, mode: 'GUARANTEED' as const };
    assert.ok(resizeComputeShare({ sharePercent: 50 }, {}, beside, guaranteed).ok);
    // The partition grew under it: 60% outside a 50% partition; lowering still fits, growing not.
    const grown = [{ gpuUuid: 'GPU-0', othersPermille: 500, isolatedPoolPermille: 500 }];
    const big = { sharePermille: 100, mode: 'CAPPED' as const };
    assert.ok(resizeComputeShare({ sharePercent: 5, mode: 'CAPPED' }, {}, grown, big).ok);
    assert.ok(resizeComputeShare({ sharePercent: 10 }, {}, grown, big).ok);
    const grow2 = resizeComputeShare({ sharePercent: 11 }, {}, grown, big);
    assert.equal(!grow2.ok && grow2.refusal.kind, 'gpu-over-guaranteed');
    const over = resizeComputeShare({ sharePercent: 60 }, {}, beside, guaranteed);
    assert.equal(!over.ok && over.refusal.kind, 'gpu-over-guaranteed');
    assert.match(
      describeComputeRefusal(!over.ok ? over.refusal : (undefined as never)),
      /would pass 50% \(what its host's 50% isolated partition leaves\)/,
    );
  });

  test('resize without a current share: ISOLATED on a GPU without a partition names it', () => {
    const d = resizeComputeShare({ sharePercent: 10, mode: 'ISOLATED' }, {}, [
      { gpuUuid: 'GPU-0', othersPermille: 0 },
    ]);
    assert.equal(!d.ok && d.refusal.kind, 'gpu-over-isolated-pool');
    assert.match(
      describeComputeRefusal(!d.ok ? d.refusal : (undefined as never)),
      /no isolated \(MPS\) partition/,
    );
  });
});
