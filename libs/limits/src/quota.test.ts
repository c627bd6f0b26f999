import { describe, test } from 'node:test';
import assert from 'node:assert/strict';
import fc from 'fast-check';
import { bytes, GiB } from './sizes.js';
import { matchesGpuModel } from './placement.js';
import {
  effectiveGpuModelFilter,
  evaluateQuota,
  type QuotaDecision,
  type QuotaDenial,
  type QuotaPolicy,
  type QuotaRequest,
  quotaBytesOf,
  type TeamUsage,
  teamUsageOf,
  withinQuotaLimits,
} from './quota.js';

function request(gib: number, gpuCount = 1, include?: string[]): QuotaRequest {
  return {
    bytesPerGpu: bytes(gib * GiB),
    gpuCount,
    ...(include === undefined ? {} : { gpuModel: { include } }),
  };
}

function usage(gib: number, shardCount: number): TeamUsage {
  return { reservedBytes: bytes(gib * GiB), shardCount };
}

function denied(decision: QuotaDecision): QuotaDenial {
  assert.equal(decision.allowed, false, 'expected a denial');
  return decision as QuotaDenial;
}

describe('quota accounting of a team', () => {
  test('counts requested bytes × GPUs, without context overhead', () => {
    assert.equal(quotaBytesOf(request(12, 2)), 24 * GiB);
    assert.deepEqual(teamUsageOf([request(12, 2), request(4)]), usage(28, 2));
    assert.deepEqual(teamUsageOf([]), usage(0, 0));
  });
});

describe('evaluateQuota allows', () => {
  test('everything when the policy sets no limit', () => {
    assert.deepEqual(evaluateQuota(request(80, 8), usage(10_000, 500), { priority: 0 }), {
      allowed: true,
    });
  });

  test('up to and including every limit', () => {
    const policy: QuotaPolicy = {
      maxTotalBytes: bytes(32 * GiB),
      maxShards: 3,
      maxBytesPerShard: bytes(24 * GiB),
      maxGpusPerShard: 2,
      allowedGpuModels: ['H100'],
      priority: 1,
    };
    assert.deepEqual(evaluateQuota(request(12, 2, ['h100']), usage(8, 2), policy), {
      allowed: true,
    });
  });
});

describe('evaluateQuota denies, naming the limit and the numbers', () => {
  test('maxTotalBytes', () => {
    const denial = denied(
      evaluateQuota(request(12), usage(20, 1), { maxTotalBytes: bytes(24 * GiB), priority: 0 }),
    );
    assert.deepEqual(denial, {
      allowed: false,
      code: 'QUOTA_EXCEEDED',
      limit: 'maxTotalBytes',
      requested: 12 * GiB,
      limitValue: 24 * GiB,
      current: 20 * GiB,
      message: 'team memory quota exceeded: 20 GiB held + 12 GiB requested = 32 GiB > limit 24 GiB',
    });
  });

  test('maxShards', () => {
    const denial = denied(evaluateQuota(request(1), usage(5, 5), { maxShards: 5, priority: 0 }));
    assert.deepEqual(denial, {
      allowed: false,
      code: 'QUOTA_EXCEEDED',
      limit: 'maxShards',
      requested: 1,
      limitValue: 5,
      current: 5,
      message: 'team shard quota exceeded: 5 held + 1 requested = 6 > limit 5',
    });
  });

  test('maxBytesPerShard counts every GPU of the shard', () => {
    const policy = { maxBytesPerShard: bytes(16 * GiB), priority: 0 };
    const denial = denied(evaluateQuota(request(12, 2), usage(0, 0), policy));
    assert.deepEqual(denial, {
      allowed: false,
      code: 'QUOTA_EXCEEDED',
      limit: 'maxBytesPerShard',
      requested: 24 * GiB,
      limitValue: 16 * GiB,
      message: 'shard too large for team policy: 2 GPUs × 12 GiB = 24 GiB > limit 16 GiB per shard',
    });
    assert.equal(
      denied(evaluateQuota(request(17), usage(0, 0), policy)).message,
      'shard too large for team policy: 1 GPU × 17 GiB = 17 GiB > limit 16 GiB per shard',
    );
  });

  test('maxGpusPerShard', () => {
    const denial = denied(
      evaluateQuota(request(1, 4), usage(0, 0), { maxGpusPerShard: 2, priority: 0 }),
    );
    assert.deepEqual(denial, {
      allowed: false,
      code: 'QUOTA_EXCEEDED',
      limit: 'maxGpusPerShard',
      requested: 4,
      limitValue: 2,
      message: 'too many GPUs for team policy: 4 requested > limit 2 per shard',
    });
  });

  test('allowedGpuModels: a model outside the list', () => {
    const policy = { allowedGpuModels: ['H100', 'L40S'], priority: 0 };
    const denial = denied(evaluateQuota(request(1, 1, ['A100']), usage(0, 0), policy));
    assert.deepEqual(denial, {
      allowed: false,
      code: 'QUOTA_EXCEEDED',
      limit: 'allowedGpuModels',
      disallowed: ['A100'],
      allowedModels: ['H100', 'L40S'],
      message: 'GPU model "A100" not allowed for this team (allowed: "H100", "L40S")',
    });
    assert.equal(
      denied(evaluateQuota(request(1, 1, ['A100', 'h100', 'V100']), usage(0, 0), policy)).message,
      'GPU models "A100", "V100" not allowed for this team (allowed: "H100", "L40S")',
    );
  });

  test('allowedGpuModels: an empty list allows nothing', () => {
    const denial = denied(
      evaluateQuota(request(1), usage(0, 0), { allowedGpuModels: [], priority: 0 }),
    );
    assert.equal(denial.limit, 'allowedGpuModels');
    assert.equal(denial.message, 'team may use no GPU model: its allowed model list is empty');
  });

  test('the shape of the request is reported before what the team holds', () => {
    const policy: QuotaPolicy = {
      maxTotalBytes: bytes(GiB),
      maxShards: 0,
      maxBytesPerShard: bytes(GiB),
      maxGpusPerShard: 1,
      allowedGpuModels: ['H100'],
      priority: 0,
    };
    const limits = [
      evaluateQuota(request(2, 2, ['A100']), usage(9, 9), policy),
      evaluateQuota(request(2, 2), usage(9, 9), policy),
      evaluateQuota(request(2, 1), usage(9, 9), policy),
      evaluateQuota(request(1, 1), usage(9, 9), policy),
      evaluateQuota(request(1, 1), usage(9, 9), { ...policy, maxShards: 10 }),
    ].map((decision) => denied(decision).limit);
    assert.deepEqual(limits, [
      'allowedGpuModels',
      'maxGpusPerShard',
      'maxBytesPerShard',
      'maxShards',
      'maxTotalBytes',
    ]);
  });
});

describe('effectiveGpuModelFilter', () => {
  test('without a policy list, the request filter as it is', () => {
    const filter = { include: ['A100'], exclude: ['PCIe'] };
    assert.deepEqual(effectiveGpuModelFilter(filter, {}), { ok: true, filter });
  });

  test('without include terms, the allowed list becomes the include terms', () => {
    assert.deepEqual(
      effectiveGpuModelFilter({ exclude: ['PCIe'] }, { allowedGpuModels: ['H100'] }),
      {
        ok: true,
        filter: { exclude: ['PCIe'], include: ['H100'] },
      },
    );
    assert.deepEqual(effectiveGpuModelFilter(undefined, { allowedGpuModels: ['H100'] }), {
      ok: true,
      filter: { include: ['H100'] },
    });
  });

  test('include terms within the allowed list stand as they are', () => {
    const filter = { include: ['NVIDIA H100 80GB', 'l40s'] };
    assert.deepEqual(effectiveGpuModelFilter(filter, { allowedGpuModels: ['h100', 'L40S'] }), {
      ok: true,
      filter,
    });
  });

  test('include terms wider than the allowed list are refused, not narrowed', () => {
    assert.deepEqual(
      effectiveGpuModelFilter({ include: ['NVIDIA'] }, { allowedGpuModels: ['H100'] }),
      {
        ok: false,
        disallowed: ['NVIDIA'],
        allowed: ['H100'],
      },
    );
  });
});

// ---------------------------------------------------------------- properties

const MODEL_NAMES = [
  'NVIDIA H100 80GB HBM3',
  'NVIDIA H100 PCIe',
  'NVIDIA A100-SXM4-40GB',
  'NVIDIA L40S',
  'NVIDIA L4',
];
const TERMS = ['h100', 'H100 PCIe', 'A100', 'l40', 'L4', 'nvidia', 'sxm'];

const policyArb: fc.Arbitrary<QuotaPolicy> = fc.record(
  {
    maxTotalBytes: fc.integer({ min: 0, max: 256 }).map((g) => bytes(g * GiB)),
    maxShards: fc.integer({ min: 0, max: 10 }),
    maxBytesPerShard: fc.integer({ min: 0, max: 128 }).map((g) => bytes(g * GiB)),
    maxGpusPerShard: fc.integer({ min: 0, max: 8 }),
    allowedGpuModels: fc.array(fc.constantFrom(...TERMS), { maxLength: 3 }),
    priority: fc.integer(),
  },
  { requiredKeys: ['priority'] },
);

const requestArb: fc.Arbitrary<QuotaRequest> = fc.record({
  bytesPerGpu: fc.integer({ min: 1, max: 96 * GiB }).map(bytes),
  gpuCount: fc.integer({ min: 1, max: 8 }),
  gpuModel: fc.record(
    {
      include: fc.array(fc.constantFrom(...TERMS), { maxLength: 2 }),
      exclude: fc.array(fc.constantFrom(...TERMS), { maxLength: 1 }),
    },
    { requiredKeys: [] },
  ),
});

const usageArb: fc.Arbitrary<TeamUsage> = fc.record({
  reservedBytes: fc.integer({ min: 0, max: 300 * GiB }).map(bytes),
  shardCount: fc.integer({ min: 0, max: 12 }),
});

describe('evaluateQuota (properties)', () => {
  test('an allowed request never takes a team past its policy', () => {
    fc.assert(
      fc.property(requestArb, usageArb, policyArb, (req, held, policy) => {
        if (!evaluateQuota(req, held, policy).allowed) return true;
        const shardBytes = req.bytesPerGpu * req.gpuCount;
        const within = (value: number, limit: number | undefined) =>
          limit === undefined || value <= limit;
        assert.ok(within(held.reservedBytes + shardBytes, policy.maxTotalBytes));
        assert.ok(within(held.shardCount + 1, policy.maxShards));
        assert.ok(within(shardBytes, policy.maxBytesPerShard));
        assert.ok(within(req.gpuCount, policy.maxGpusPerShard));
        return true;
      }),
      { numRuns: 1000 },
    );
  });

  test('a denied request exceeds the limit it names', () => {
    fc.assert(
      fc.property(requestArb, usageArb, policyArb, (req, held, policy) => {
        const decision = evaluateQuota(req, held, policy);
        if (decision.allowed) return true;
        switch (decision.limit) {
          case 'maxTotalBytes':
          case 'maxShards':
            return decision.current + decision.requested > decision.limitValue;
          case 'maxBytesPerShard':
          case 'maxGpusPerShard':
            return decision.requested > decision.limitValue;
          case 'allowedGpuModels':
            return policy.allowedGpuModels !== undefined;
          default:
            return decision satisfies never;
        }
      }),
      { numRuns: 1000 },
    );
  });

  test('an allowed request can only be placed on an allowed model', () => {
    fc.assert(
      fc.property(requestArb, policyArb, fc.constantFrom(...MODEL_NAMES), (req, policy, model) => {
        const effective = effectiveGpuModelFilter(req.gpuModel, policy);
        if (!effective.ok || !matchesGpuModel(model, effective.filter)) return true;
        const allowed = policy.allowedGpuModels;
        return (
          matchesGpuModel(model, req.gpuModel) &&
          (allowed === undefined || matchesGpuModel(model, { include: allowed }))
        );
      }),
      { numRuns: 1000 },
    );
  });
});

/** The requests a batch accepts, decided one after another from `held` (as createShard does). */
function acceptedFrom(
  requests: readonly QuotaRequest[],
  held: TeamUsage,
  policy: QuotaPolicy,
): QuotaRequest[] {
  const accepted: QuotaRequest[] = [];
  let usage = held;
  for (const req of requests) {
    if (!evaluateQuota(req, usage, policy).allowed) continue;
    accepted.push(req);
    usage = plus(usage, teamUsageOf([req]));
  }
  return accepted;
}

function plus(a: TeamUsage, b: TeamUsage): TeamUsage {
  return {
    reservedBytes: bytes(a.reservedBytes + b.reservedBytes),
    shardCount: a.shardCount + b.shardCount,
  };
}

describe('withinQuotaLimits: a batch decided without the team lock, checked under it (properties)', () => {
  test('passing the check means every accepted create was within the limits after all that committed before it', () => {
    fc.assert(
      fc.property(
        fc.array(requestArb, { maxLength: 8 }),
        usageArb,
        usageArb,
        policyArb,
        (requests, read, now, policy) => {
          // Decided on `read` (the usage when the batch read it, unlocked); `now` is what the
          // team holds when the batch takes the lock (others committed or freed meanwhile).
          const accepted = acceptedFrom(requests, read, policy);
          if (accepted.length === 0) return true;
          if (!withinQuotaLimits(plus(now, teamUsageOf(accepted)), policy)) return true;
          let usage = now;
          for (const req of accepted) {
            assert.ok(evaluateQuota(req, usage, policy).allowed, 'a locked run would refuse it');
            usage = plus(usage, teamUsageOf([req]));
          }
          return true;
        },
      ),
      { numRuns: 2000 },
    );
  });

  test('a batch whose read nobody changed always passes', () => {
    fc.assert(
      fc.property(
        fc.array(requestArb, { maxLength: 8 }),
        usageArb,
        policyArb,
        (requests, held, policy) => {
          const accepted = acceptedFrom(requests, held, policy);
          return (
            accepted.length === 0 || withinQuotaLimits(plus(held, teamUsageOf(accepted)), policy)
          );
        },
      ),
      { numRuns: 2000 },
    );
  });

  test('any interleaving of batches, checked and committed one at a time, never passes a limit', () => {
    fc.assert(
      fc.property(
        policyArb,
        fc.array(fc.tuple(fc.array(requestArb, { maxLength: 5 }), fc.nat(), fc.nat()), {
          minLength: 1,
          maxLength: 6,
        }),
        (policy, batches) => {
          // Each batch reads the committed usage at some point (its read index) and commits
          // at a later one; batches commit in the order of their commit index.
          const order = batches
            .map(([requests, a, b], i) => ({
              requests,
              read: Math.min(a, b),
              commit: Math.max(a, b),
              i,
            }))
            .sort((x, y) => x.commit - y.commit || x.i - y.i);
          let committed: TeamUsage = { reservedBytes: bytes(0), shardCount: 0 };
          const history: { at: number; usage: TeamUsage }[] = [{ at: -1, usage: committed }];
          for (const batch of order) {
            const seen = [...history].reverse().find((h) => h.at < batch.read)!.usage;
            let accepted = acceptedFrom(batch.requests, seen, policy);
            if (
              accepted.length > 0 &&
              !withinQuotaLimits(plus(committed, teamUsageOf(accepted)), policy)
            ) {
              accepted = acceptedFrom(batch.requests, committed, policy); // again, under the lock
            }
            committed = plus(committed, teamUsageOf(accepted));
            history.push({ at: batch.commit, usage: committed });
            if (accepted.length > 0) assert.ok(withinQuotaLimits(committed, policy));
          }
          return true;
        },
      ),
      { numRuns: 2000 },
    );
  });
});
