import assert from 'node:assert/strict';
import { describe, it } from 'node:test';

import { KeyedMutex } from './keyed-mutex.js';

const tick = () => new Promise((resolve) => setImmediate(resolve));

describe('KeyedMutex', () => {
  it('runs tasks of one key one at a time, in order, other keys alongside', async () => {
    const mutex = new KeyedMutex();
    const log: string[] = [];
    let releaseFirst!: () => void;
    const first = mutex.run('a', async () => {
      log.push('a1 start');
      await new Promise<void>((resolve) => (releaseFirst = resolve));
      log.push('a1 end');
    });
    const second = mutex.run('a', async () => {
      log.push('a2');
    });
    const other = mutex.run('b', async () => {
      log.push('b');
    });
    await other;
    await tick();
    assert.deepEqual(log, ['a1 start', 'b']);
    assert.equal(mutex.busy('a'), true);
    releaseFirst();
    await Promise.all([first, second]);
    assert.deepEqual(log, ['a1 start', 'b', 'a1 end', 'a2']);
    await tick();
    assert.equal(mutex.busy('a'), false);
  });

  it('a failed task does not block the next', async () => {
    const mutex = new KeyedMutex();
    await assert.rejects(
      mutex.run('a', async () => Promise.reject(new Error('boom'))),
      /boom/,
    );
    assert.equal(await mutex.run('a', async () => 'next'), 'next');
  });
});
