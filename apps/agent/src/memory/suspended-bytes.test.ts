import assert from 'node:assert/strict';
import { mkdtempSync, readdirSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, describe, it } from 'node:test';

import { SuspendedBytesStore } from './suspended-bytes.js';

describe('SuspendedBytesStore', () => {
  const dir = mkdtempSync(join(tmpdir(), 'gpushards-suspended-bytes-'));
  const store = new SuspendedBytesStore(join(dir, 'memory'));
  after(() => rmSync(dir, { recursive: true, force: true }));

  it("keeps each process's bytes for one container, replaces them whole, and forgets them", () => {
    assert.equal(store.read('s1', 'c1'), undefined);
    store.write('s1', 'c1', new Map([[4242, 556 * 2 ** 20]]));
    store.write(
      's1',
      'c1',
      new Map([
        [4242, 556 * 2 ** 20],
        [4243, 300 * 2 ** 20],
      ]),
    );
    assert.deepEqual(
      store.read('s1', 'c1'),
      new Map([
        [4242, 556 * 2 ** 20],
        [4243, 300 * 2 ** 20],
      ]),
    );
    assert.deepEqual(readdirSync(join(dir, 'memory')), ['s1.json'], 'no temporary file left');
    assert.equal(store.read('s1', 'another container'), undefined);
    store.remove('s1');
    assert.equal(store.read('s1', 'c1'), undefined);
    store.remove('s1');
  });

  it('a torn or foreign file reads as nothing known; odd entries are left out', () => {
    writeFileSync(join(dir, 'memory', 's2.json'), '{"containerId":"c2","bytesBy');
    assert.equal(store.read('s2', 'c2'), undefined);
    writeFileSync(
      join(dir, 'memory', 's2.json'),
      JSON.stringify({ containerId: 'c2', bytesByPid: { '7': 5, x: 1, '8': -1, '9': 'a' } }),
    );
    assert.deepEqual(store.read('s2', 'c2'), new Map([[7, 5]]));
  });
});
