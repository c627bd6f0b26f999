import { describe, test } from 'node:test';
import assert from 'node:assert/strict';
import fc from 'fast-check';
import {
  COMPUTE_MODES,
  describeComputeRefusal,
  effectiveSharesPermille,
  FULL_GPU_PERMILLE,
  guaranteedShareFits,
  MIN_DEFAULT_SHARE_PERMILLE,
  resizeComputeShare,
  resolveComputeShare,
  type TeamComputePolicy,
} from './compute-share.js';
import { place } from './placement.js';
import { fleetArb, requestArb } from './testing/placement-arbitraries.js';
import type { Host } from './inventory.js';

const policyArb: fc.Arbitrary<TeamComputePolicy> = fc.record(
  {
    maxSharePercent: fc.integer({ min: 1, max: 100 }),
    sharesAllowed: fc.boolean(),
  },
  { requiredKeys: [] },
);

describe('compute share: resolveComputeShare', () => {
  test('no share asked: guaranteed, 0 permille (the default split); capped needs a number', () => {
    assert.deepEqual(resolveComputeShare({}), {
      ok: true,
      value: { sharePermille: 0, mode: 'GUARANTEED' },
    });
    const capped = resolveComputeShare({ mode: 'CAPPED' });
    assert.equal(capped.ok, false);
    assert.equal(!capped.ok && capped.refusal.kind, 'capped-without-share');
  });

  test('a valid share within the policy is stored as permille with its mode', () => {
    fc.assert(
      fc.property(
        fc.integer({ min: 1, max: 100 }),
        fc.constantFrom(...COMPUTE_MODES),
        policyArb,
        (p, mode, policy) => {
          const d = resolveComputeShare({ sharePercent: p, mode }, policy);
          const allowed = policy.sharesAllowed !== false && (policy.maxSharePercent ?? 100) >= p;
          assert.equal(d.ok, allowed);
          if (d.ok) assert.deepEqual(d.value, { sharePermille: p * 10, mode });
          else assert.ok(describeComputeRefusal(d.refusal).length > 0);
        },
      ),
    );
  });

  test('anything but a whole percentage from 1 to 100 is refused, whatever the policy', () => {
    fc.assert(
      fc.property(
        fc.oneof(fc.integer({ max: 0 }), fc.integer({ min: 101 }), fc.double({ noInteger: true })),
        policyArb,
        (p, policy) => {
          const d = resolveComputeShare({ sharePercent: p }, policy);
          assert.equal(d.ok, false);
          assert.equal(!d.ok && d.refusal.kind, 'invalid-share');
        },
      ),
    );
    const bad = resolveComputeShare({ sharePercent: 10, mode: 'BURST' as never });
    assert.equal(!bad.ok && bad.refusal.kind, 'invalid-mode');
  });
});

describe('compute share: a GPU guarantees at most 100%', () => {
  test('guaranteedShareFits is exactly "sum ≤ 1000", and a share of 0 always fits', () => {
    fc.assert(
      fc.property(
        fc.integer({ min: 0, max: 1000 }),
        fc.integer({ min: 0, max: 1000 }),
        (placed, share) => {
          assert.equal(
            guaranteedShareFits(placed, share),
            share === 0 || placed + share <= FULL_GPU_PERMILLE,
          );
        },
      ),
    );
  });

  test('resize: accepted only when every GPU of the shard takes the new share beside the others', () => {
    fc.assert(
      fc.property(
        fc.integer({ min: 1, max: 100 }),
        fc.array(fc.integer({ min: 0, max: 1000 }), { minLength: 1, maxLength: 8 }),
        (p, others) => {
          const gpus = others.map((othersPermille, i) => ({ gpuUuid: `GPU-${i}`, othersPermille }));
          const d = resizeComputeShare({ sharePercent: p }, {}, gpus);
          const fits = others.every((o) => o + p * 10 <= FULL_GPU_PERMILLE);
          assert.equal(d.ok, fits);
          if (!d.ok) {
            assert.equal(d.refusal.kind, 'gpu-over-guaranteed');
            assert.match(describeComputeRefusal(d.refusal), /would pass 100%/);
          }
        },
      ),
    );
  });

  test('place() never puts a GPU past 100% of guaranteed compute, and ignores compute when none is asked', () => {
    const withCompute = fleetArb.chain((fleet) =>
      fc
        .array(fc.integer({ min: 0, max: 1000 }), {
          minLength: fleet.reduce((n, h) => n + h.gpus.length, 0),
          maxLength: fleet.reduce((n, h) => n + h.gpus.length, 0),
        })
        .map((shares): Host[] => {
          let i = 0;
          return fleet.map((h) => ({
            ...h,
            gpus: h.gpus.map((g) => ({ ...g, guaranteedComputePermille: shares[i++]! })),
          }));
        }),
    );
    fc.assert(
      fc.property(
        withCompute,
        requestArb,
        fc.integer({ min: 0, max: 1000 }),
        (fleet, request, share) => {
          const result = place({ ...request, computeSharePermille: share }, fleet);
          const plain = place(request, fleet);
          if (result.kind === 'placed') {
            const gpus = fleet.flatMap((h) => h.gpus);
            for (const uuid of result.gpuUuids) {
              const g = gpus.find((x) => x.uuid === uuid)!;
              assert.ok(share === 0 || g.guaranteedComputePermille! + share <= FULL_GPU_PERMILLE);
            }
          }
          // Asking for compute can only take hosts away, never add one.
          if (plain.kind === 'no-fit') assert.equal(result.kind, 'no-fit');
          if (share === 0) assert.deepEqual(result, plain);
        },
      ),
    );
  });

  test('a share out of range is a clear error from place()', () => {
    assert.throws(
      () => place({ bytesPerGpu: 1 as never, gpuCount: 1, computeSharePermille: 1001 }, []),
      /0 to 1000/,
    );
  });
});

describe('compute share: the default for a shard with none', () => {
  test('shares are kept; shards without one split what is left equally, at least 5%', () => {
    fc.assert(
      fc.property(fc.array(fc.integer({ min: 0, max: 1000 }), { maxLength: 32 }), (shares) => {
        const eff = effectiveSharesPermille(shares);
        assert.equal(eff.length, shares.length);
        const taken = shares.filter((s) => s > 0).reduce((a, b) => a + b, 0);
        const unset = shares.filter((s) => s === 0).length;
        shares.forEach((s, i) => {
          if (s > 0) assert.equal(eff[i], s);
          else {
            assert.ok(eff[i]! >= MIN_DEFAULT_SHARE_PERMILLE);
            assert.equal(
              eff[i],
              Math.max(MIN_DEFAULT_SHARE_PERMILLE, Math.floor(Math.max(0, 1000 - taken) / unset)),
            );
          }
        });
      }),
    );
    assert.deepEqual(effectiveSharesPermille([250, 0, 0]), [250, 375, 375]);
  });
});
