import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { TickBatch } from './tick-batch.js';

describe('TickBatch', () => {
  it('loads the keys of one tick with one call, each key once, and answers every caller', async () => {
    const calls: (readonly string[])[] = [];
    const batch = new TickBatch<string, string>(
      (keys) => {
        calls.push(keys);
        return Promise.resolve(new Map(keys.filter((k) => k !== 'gone').map((k) => [k, `v-${k}`])));
      },
      () => 'missing',
    );
    const first = await Promise.all(['a', 'b', 'a', 'gone'].map((key) => batch.load(key)));
    assert.deepEqual(first, ['v-a', 'v-b', 'v-a', 'missing']);
    assert.deepEqual(calls, [['a', 'b', 'gone']]);
    assert.equal(await batch.load('c'), 'v-c');
    assert.deepEqual(calls.at(-1), ['c'], 'a later tick is a new batch');
  });

  it("a failed load fails every caller of its batch, and not the next batch's", async () => {
    let fail = true;
    const batch = new TickBatch<number, number>(
      (keys) =>
        fail
          ? Promise.reject(new Error('database down'))
          : Promise.resolve(new Map(keys.map((k) => [k, k * 2]))),
      () => 0,
    );
    const results = await Promise.allSettled([batch.load(1), batch.load(2)]);
    assert.deepEqual(
      results.map((r) => r.status),
      ['rejected', 'rejected'],
    );
    fail = false;
    assert.equal(await batch.load(3), 6);
  });
});
