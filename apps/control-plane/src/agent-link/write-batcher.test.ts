import assert from 'node:assert/strict';
import { describe, it } from 'node:test';

import { heartbeat } from '../testing/fleet-fixtures.js';
import { WriteBatcher } from './write-batcher.js';

describe('WriteBatcher', () => {
  it('writes heartbeats that arrive together in one batch; each caller gets its own outcome', async () => {
    const batches: string[][] = [];
    const batcher = new WriteBatcher(
      async (beats: readonly { hostId: string; heartbeat: unknown }[]) => {
        batches.push(beats.map((beat) => beat.hostId));
        return beats.map((beat) => `done ${beat.hostId}`);
      },
      { maxBatch: 3, maxWaitMs: 20 },
    );
    const hosts = ['a', 'b', 'c', 'd', 'e'];
    const outcomes = await Promise.all(
      hosts.map((hostId) => batcher.record({ hostId, heartbeat: heartbeat(hostId, new Date()) })),
    );
    assert.deepEqual(outcomes, ['done a', 'done b', 'done c', 'done d', 'done e']);
    assert.deepEqual(batches, [
      ['a', 'b', 'c'],
      ['d', 'e'],
    ]);
  });

  it('a failed write rejects every heartbeat of its batch, and the next batch is written', async () => {
    let calls = 0;
    const batcher = new WriteBatcher(
      async (beats) => {
        calls++;
        if (calls === 1) throw new Error('database gone');
        return beats.map(() => 'ok');
      },
      { maxWaitMs: 0 },
    );
    const failed = [
      batcher.record({ hostId: 'a', heartbeat: heartbeat('a', new Date()) }),
      batcher.record({ hostId: 'b', heartbeat: heartbeat('b', new Date()) }),
    ];
    for (const one of failed) await assert.rejects(one, /database gone/);
    assert.equal(
      await batcher.record({ hostId: 'c', heartbeat: heartbeat('c', new Date()) }),
      'ok',
    );
  });

  it('refuses nonsense options', () => {
    assert.throws(() => new WriteBatcher(async () => [], { maxBatch: 0 }), RangeError);
  });
});
