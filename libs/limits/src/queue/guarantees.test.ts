import { describe, test } from 'node:test';
import assert from 'node:assert/strict';
import { bytes, GiB } from '../sizes.js';
import { gpuUuid, type Host, hostId } from '../inventory.js';
import { checkGuarantees } from './guarantees.js';
import { decayedUsage, decayWeight, fairShareKey, compareFairShare } from './fair-share.js';
import { checkPriorityClass, priorityClasses } from './priority.js';
import { A100, H100 } from '../testing/queue-arbitraries.js';

function host(name: string, models: string[]): Host {
  return {
    id: hostId(name),
    name,
    state: 'ONLINE',
    labels: {},
    gpus: models.map((model, index) => ({
      uuid: gpuUuid(`GPU-${name}-${index}`),
      index,
      model,
      totalBytes: bytes((model === H100 ? 80 : 40) * GiB),
      reservedBytes: bytes(0),
    })),
  };
}

const fleet = [host('h1', [H100, H100]), host('h2', [A100, A100])];

describe('guarantee feasibility', () => {
  test('the sum of guarantees per GPU model may not pass its capacity; the message names the numbers', () => {
    assert.deepEqual(
      checkGuarantees(
        [
          {
            teamId: 'a',
            teamName: 'alpha',
            guarantee: { bytes: bytes(100 * GiB), gpuModel: 'H100' },
          },
          {
            teamId: 'b',
            teamName: 'beta',
            guarantee: { bytes: bytes(60 * GiB), gpuModel: 'H100' },
          },
        ],
        fleet,
      ),
      { ok: true },
    );
    const refused = checkGuarantees(
      [
        {
          teamId: 'a',
          teamName: 'alpha',
          guarantee: { bytes: bytes(100 * GiB), gpuModel: 'H100' },
        },
        { teamId: 'b', teamName: 'beta', guarantee: { bytes: bytes(61 * GiB), gpuModel: 'H100' } },
      ],
      fleet,
    );
    assert.equal(refused.ok, false);
    assert.ok(!refused.ok);
    assert.equal(
      refused.message,
      'guarantees on GPU model "h100" total 161 GiB (alpha 100 GiB, beta 61 GiB) > 160 GiB that the fleet\'s 2 matching GPUs can hold',
    );
  });

  test('overlapping terms: an any-model guarantee and a per-model one must fit together', () => {
    const result = checkGuarantees(
      [
        { teamId: 'a', guarantee: { bytes: bytes(160 * GiB), gpuModel: 'h100' } },
        { teamId: 'b', guarantee: { bytes: bytes(81 * GiB) } },
      ],
      fleet,
    );
    assert.equal(result.ok, false);
    assert.ok(!result.ok && result.capacity === 240 * GiB && result.guaranteed === 241 * GiB);
  });

  test('guaranteed GPUs may not pass the GPU count', () => {
    const result = checkGuarantees(
      [
        { teamId: 'a', guarantee: { bytes: bytes(1), gpus: 2, gpuModel: 'a100' } },
        { teamId: 'b', guarantee: { bytes: bytes(1), gpus: 1, gpuModel: 'a100' } },
      ],
      fleet,
    );
    assert.ok(
      !result.ok && result.what === 'gpus' && result.guaranteed === 3 && result.capacity === 2,
    );
  });
});

describe('fair share', () => {
  test('usage halves every half-life', () => {
    const week = 7 * 24 * 3600 * 1000;
    assert.equal(decayWeight(week), 0.5);
    assert.equal(
      decayedUsage(
        [
          { atMs: 0, gibHours: 8 },
          { atMs: 2 * week, gibHours: 1 },
        ],
        2 * week,
      ),
      3,
    );
    assert.equal(decayedUsage([{ atMs: 0, gibHours: 8 }], 3600_000, 3600_000), 4);
  });

  test('less used relative to the guarantee goes first; no guarantee but usage goes last', () => {
    const keys = [
      fairShareKey(10, 10 * GiB),
      fairShareKey(10, 100 * GiB),
      fairShareKey(1, 0),
      fairShareKey(0, 0),
    ];
    const order = keys
      .map((k, i) => [k, i] as const)
      .sort((x, y) => compareFairShare(x[0], y[0]))
      .map(([, i]) => i);
    assert.deepEqual(order, [3, 1, 0, 2]);
  });
});

describe('priority classes', () => {
  test('a team may not use a class above its cap; unknown classes are named', () => {
    const classes = priorityClasses();
    assert.equal(checkPriorityClass(classes, 'training', 'build').allowed, true);
    const above = checkPriorityClass(classes, 'inference', 'build');
    assert.ok(
      !above.allowed && /above this team's highest allowed class "build"/.test(above.message),
    );
    const unknown = checkPriorityClass(classes, 'batch', undefined);
    assert.ok(!unknown.allowed && /known: "inference", "build", "training"/.test(unknown.message));
    assert.throws(
      () =>
        priorityClasses([
          { name: 'x', rank: 1, preemptible: true },
          { name: 'y', rank: 1, preemptible: true },
        ]),
      /rank 1/,
    );
  });
});
