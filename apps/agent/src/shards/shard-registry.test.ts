import assert from 'node:assert/strict';
import { describe, it } from 'node:test';

import { ShardRegistry } from './shard-registry.js';
import type { StateReporter } from './state-reporter.js';

describe('ShardRegistry: moves of a shard taken on in the order the control plane decided them', () => {
  const registry = () => new ShardRegistry({} as StateReporter);

  it('refuses a move decided before the newest taken on, takes a resend of the same one, a newer one, and one without a version', () => {
    const shards = registry();
    assert.equal(shards.takeMoveOn('s', 5), true);
    assert.equal(shards.takeMoveOn('s', 7), true);
    assert.equal(shards.takeMoveOn('s', 5), false, 'a late suspend after the resume');
    assert.equal(shards.newestMoveOf('s'), 7, 'a refused move leaves the newest as it was');
    assert.equal(shards.takeMoveOn('s', 7), true, 'the same decision sent again');
    assert.equal(shards.takeMoveOn('s', undefined), true, 'an older control plane: not ordered');
    assert.equal(shards.newestMoveOf('s'), 7);
    assert.equal(shards.takeMoveOn('s', 9), true);
    assert.equal(shards.takeMoveOn('other', 1), true, 'each shard has its own order');
  });

  it('forgets the order with the shard', () => {
    const shards = registry();
    assert.equal(shards.takeMoveOn('s', 7), true);
    shards.forget('s');
    assert.equal(shards.newestMoveOf('s'), undefined);
    assert.equal(shards.takeMoveOn('s', 5), true);
  });
});
