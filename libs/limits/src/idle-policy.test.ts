import { describe, test } from 'node:test';
import assert from 'node:assert/strict';
import fc from 'fast-check';
import {
  decideIdle,
  idlePolicyProblem,
  idleStart,
  MAX_IDLE_SECONDS,
  MIN_IDLE_SECONDS,
  type IdleAction,
  type IdlePolicy,
  type IdleShard,
} from './idle-policy.js';

const policyArb: fc.Arbitrary<IdlePolicy> = fc
  .tuple(
    fc.integer({ min: MIN_IDLE_SECONDS, max: 3600 }),
    fc.option(fc.integer({ min: 0, max: 3600 })),
    fc.option(fc.integer({ min: 0, max: 3600 })),
  )
  .map(([idle, extra, suspendExtra]) => ({
    idleAfterSeconds: idle,
    ...(extra === null ? {} : { stopAfterSeconds: idle + extra }),
    ...(suspendExtra === null ? {} : { suspendAfterSeconds: idle + suspendExtra }),
  }));

const NOW = 10_000_000_000;

const shardArb: fc.Arbitrary<IdleShard> = fc
  .record({
    shardId: fc.uuid(),
    startedAgo: fc.integer({ min: 0, max: 7200_000 }),
    kernelAgo: fc.option(fc.integer({ min: 0, max: 7200_000 })),
    observed: fc.boolean(),
    reported: fc.constantFrom('no', 'same', 'other'),
    elastic: fc.boolean(),
  })
  .map(({ shardId, startedAgo, kernelAgo, observed, reported, elastic }) => {
    const startedAt = NOW - startedAgo;
    // A kernel is never before the start.
    const lastKernelAt = kernelAgo === null ? null : Math.max(startedAt, NOW - kernelAgo);
    const since = lastKernelAt ?? startedAt;
    return {
      shardId,
      startedAt,
      lastKernelAt,
      observed,
      idleSince: reported === 'no' ? null : reported === 'same' ? since : since - 1000,
      elastic,
    };
  });

describe('idle policy: decideIdle', () => {
  test('at most one action per shard, and only for shards it was given', () => {
    fc.assert(
      fc.property(
        fc.uniqueArray(shardArb, { selector: (s) => s.shardId, maxLength: 20 }),
        policyArb,
        (shards, policy) => {
          const actions = decideIdle(shards, policy, NOW);
          const ids = actions.map((a) => a.shardId);
          assert.equal(new Set(ids).size, ids.length);
          for (const id of ids) assert.ok(shards.some((s) => s.shardId === id));
        },
      ),
    );
  });

  test('a shard whose host reports no activity is never reported or stopped', () => {
    fc.assert(
      fc.property(shardArb, policyArb, (shard, policy) => {
        const [action] = decideIdle([{ ...shard, observed: false }], policy, NOW);
        assert.ok(action === undefined || action.kind === 'clear');
      }),
    );
  });

  test('reported exactly when idle past idleAfterSeconds and not reported for this idle spell', () => {
    fc.assert(
      fc.property(shardArb, policyArb, (shard, policy) => {
        const [action] = decideIdle([shard], policy, NOW);
        const idle = (NOW - idleStart(shard)) / 1000;
        const shouldReport =
          shard.observed && idle >= policy.idleAfterSeconds && shard.idleSince !== idleStart(shard);
        assert.equal(action?.kind === 'report', shouldReport);
        if (action?.kind === 'report') assert.equal(action.idleSince, idleStart(shard));
      }),
    );
  });

  test('stopped only when the policy stops, past stopAfterSeconds, and reported for this idle spell', () => {
    fc.assert(
      fc.property(shardArb, policyArb, (shard, policy) => {
        const [action] = decideIdle([shard], policy, NOW);
        if (action?.kind !== 'stop') return;
        assert.ok(shard.observed);
        assert.ok(policy.stopAfterSeconds !== undefined);
        assert.ok((NOW - idleStart(shard)) / 1000 >= policy.stopAfterSeconds);
        assert.equal(shard.idleSince, idleStart(shard));
        assert.ok(
          !(shard.elastic && policy.suspendAfterSeconds !== undefined),
          'an elastic shard stopped',
        );
      }),
    );
  });

  test('suspended only when elastic and the policy suspends, past suspendAfterSeconds, and reported for this idle spell', () => {
    fc.assert(
      fc.property(shardArb, policyArb, (shard, policy) => {
        const [action] = decideIdle([shard], policy, NOW);
        if (action?.kind !== 'suspend') return;
        assert.ok(shard.observed && shard.elastic === true);
        assert.ok(policy.suspendAfterSeconds !== undefined);
        assert.ok((NOW - idleStart(shard)) / 1000 >= policy.suspendAfterSeconds);
        assert.equal(shard.idleSince, idleStart(shard));
      }),
    );
    const idle: IdleShard = {
      shardId: 's',
      startedAt: 0,
      lastKernelAt: null,
      observed: true,
      idleSince: 0,
    };
    const policy = { idleAfterSeconds: 60, suspendAfterSeconds: 120, stopAfterSeconds: 120 };
    assert.equal(decideIdle([{ ...idle, elastic: true }], policy, 200_000)[0]?.kind, 'suspend');
    assert.equal(decideIdle([idle], policy, 200_000)[0]?.kind, 'stop');
    assert.deepEqual(
      decideIdle([idle], { idleAfterSeconds: 60, suspendAfterSeconds: 120 }, 200_000),
      [],
    );
  });

  test('over time, every stop follows a report of the same idle spell in an earlier pass', () => {
    fc.assert(
      fc.property(
        policyArb,
        fc.array(fc.record({ step: fc.integer({ min: 1, max: 600_000 }), kernel: fc.boolean() }), {
          minLength: 1,
          maxLength: 60,
        }),
        (policy, steps) => {
          let now = 0;
          const shard: { -readonly [K in keyof IdleShard]: IdleShard[K] } = {
            shardId: 's',
            startedAt: 0,
            lastKernelAt: null,
            observed: true,
            idleSince: null,
          };
          const reports: IdleAction[] = [];
          for (const { step, kernel } of steps) {
            now += step;
            if (kernel) shard.lastKernelAt = now - Math.floor(step / 2);
            const [action] = decideIdle([shard], policy, now);
            if (action === undefined) continue;
            if (action.kind === 'report') {
              reports.push(action);
              shard.idleSince = action.idleSince;
            } else if (action.kind === 'clear') {
              shard.idleSince = null;
            } else {
              assert.ok(
                reports.some((r) => r.kind === 'report' && r.idleSince === action.idleSince),
                `a ${action.kind} without an earlier report`,
              );
              return; // stopped or suspended: the shard leaves RUNNING
            }
          }
        },
      ),
    );
  });

  test('a kernel after the report clears it', () => {
    const shard: IdleShard = {
      shardId: 's',
      startedAt: 0,
      lastKernelAt: NOW - 1000,
      observed: true,
      idleSince: 5,
    };
    assert.deepEqual(decideIdle([shard], { idleAfterSeconds: 60 }, NOW), [
      { kind: 'clear', shardId: 's' },
    ]);
  });
});

describe('idle policy: idlePolicyProblem', () => {
  test('bounds', () => {
    assert.equal(idlePolicyProblem({ idleAfterSeconds: MIN_IDLE_SECONDS }), undefined);
    assert.equal(idlePolicyProblem({ idleAfterSeconds: 600, stopAfterSeconds: 600 }), undefined);
    assert.equal(idlePolicyProblem({ idleAfterSeconds: 59 })?.field, 'idleAfterSeconds');
    assert.equal(
      idlePolicyProblem({ idleAfterSeconds: MAX_IDLE_SECONDS + 1 })?.field,
      'idleAfterSeconds',
    );
    assert.equal(idlePolicyProblem({ idleAfterSeconds: 1.5 })?.field, 'idleAfterSeconds');
    assert.equal(
      idlePolicyProblem({ idleAfterSeconds: 600, stopAfterSeconds: 599 })?.field,
      'stopAfterSeconds',
    );
    assert.equal(
      idlePolicyProblem({ idleAfterSeconds: 600, suspendAfterSeconds: 599 })?.field,
      'suspendAfterSeconds',
    );
    assert.equal(idlePolicyProblem({ idleAfterSeconds: 600, suspendAfterSeconds: 600 }), undefined);
  });
});
