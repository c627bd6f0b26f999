import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import type { Waiting } from '@gpushards/limits';
import { StartEstimates } from './start-estimates.js';

/** `n` shards waiting for capacity, ids `${prefix}0`… in queue order. */
function queueOf(prefix: string, n: number): { pending: { id: string }[]; waiting: Waiting[] } {
  const pending = Array.from({ length: n }, (_, i) => ({ id: `${prefix}${i}` }));
  const waiting = pending.map((shard): Waiting => ({
    shardId: shard.id,
    reason: { kind: 'capacity' },
  }));
  return { pending, waiting };
}

describe("a follower's start estimates", () => {
  it('measure the rate from the shards placed between two views, not the ones deleted', async () => {
    const estimates = new StartEstimates(30);
    const placed = new Set(['s0', 's1', 's2', 's3', 's4', 's5']);
    const asked: string[][] = [];
    const placedAmong = async (ids: readonly string[]) => {
      asked.push([...ids]);
      return ids.filter((id) => placed.has(id)).length;
    };
    const first = queueOf('s', 20);
    await estimates.viewed(first.pending, first.waiting, placedAmong, 0);
    assert.equal(estimates.of(first.waiting, 0).size, 0, 'cold: nothing measured yet');

    // Two seconds later s0-s7 are gone: s0-s5 placed, s6 and s7 deleted.
    const second = { pending: first.pending.slice(8), waiting: first.waiting.slice(8) };
    await estimates.viewed(second.pending, second.waiting, placedAmong, 2_000);
    assert.deepEqual(asked, [['s0', 's1', 's2', 's3', 's4', 's5', 's6', 's7']]);

    const at = estimates.of(second.waiting, 2_000);
    // 6 placed in 2 s: 3 per second; the head is the next placement, a third of a second away.
    assert.equal(at.get('s8'), 2_000 + 1_000 / 3);
    assert.equal(at.get('s9'), 2_000 + 2_000 / 3);
  });

  it('stay cold while fewer than five were placed', async () => {
    const estimates = new StartEstimates(30);
    const first = queueOf('t', 10);
    await estimates.viewed(first.pending, first.waiting, async () => 0, 0);
    const second = { pending: first.pending.slice(4), waiting: first.waiting.slice(4) };
    await estimates.viewed(second.pending, second.waiting, async (ids) => ids.length, 1_000);
    assert.equal(estimates.of(second.waiting, 1_000).size, 0, 'four placements give no rate');
  });
});
