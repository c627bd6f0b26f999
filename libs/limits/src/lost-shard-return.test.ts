import assert from 'node:assert/strict';
import { describe, test } from 'node:test';
import fc from 'fast-check';
import { OBSERVED_MEMORY } from './lifecycle/convergence.js';
import { SUSPEND_CAUSES, canTransition } from './lifecycle/transitions.js';
import {
  GPUS_GIVEN_AWAY,
  lostShardReturn,
  type ReturnGpu,
  type ReturningShard,
  type ReturnRoom,
} from './lost-shard-return.js';
import { canReserve, promiseBytes } from './placement.js';
import { bytes, GiB } from './sizes.js';

const gpuArb: fc.Arbitrary<ReturnGpu> = fc
  .record({
    uuid: fc.constantFrom('GPU-a', 'GPU-b', 'GPU-c'),
    totalGiB: fc.constantFrom(16, 40, 80),
    reservedGiB: fc.integer({ min: 0, max: 100 }),
    suspendedGiB: fc.integer({ min: 0, max: 120 }),
    unownedGiB: fc.integer({ min: 0, max: 8 }),
    ratio: fc.constantFrom(0.9, 1, 1.5, 2),
    missing: fc.integer({ min: 0, max: 9 }).map((n) => n === 0),
  })
  .map((g) => ({
    uuid: g.uuid,
    totalBytes: bytes(g.totalGiB * GiB),
    reservedBytes: bytes(g.reservedGiB * GiB),
    suspendedBytes: bytes(g.suspendedGiB * GiB),
    unownedBytes: bytes(g.unownedGiB * GiB),
    overcommitRatio: g.ratio,
    ...(g.missing ? { missing: true } : {}),
  }));

const shardArb: fc.Arbitrary<ReturningShard> = fc.record({
  memory: fc.constantFrom(...OBSERVED_MEMORY),
  capBytesPerGpu: fc.integer({ min: 1, max: 60 }).map((g) => bytes(g * GiB)),
  gpuCount: fc.integer({ min: 1, max: 3 }),
  resumeWanted: fc.boolean(),
  suspendCause: fc.constantFrom(null, ...SUSPEND_CAUSES),
});

const caseArb = shardArb.chain((shard) =>
  fc.record({
    shard: fc.constant(shard),
    room: fc.record({
      // Mostly its own count of GPUs; now and then one fewer (the host lost one).
      gpus: fc.array(gpuArb, {
        minLength: Math.max(0, shard.gpuCount - 1),
        maxLength: shard.gpuCount,
      }),
      suspendBudgetBytes: fc.constantFrom(0, 20, 50, 100, 400).map((g) => g * GiB),
      suspendedBytes: fc.integer({ min: 0, max: 200 }).map((g) => g * GiB),
    }),
  }),
);

const promiseFits = (gpu: ReturnGpu, cap: number) =>
  gpu.reservedBytes + (gpu.suspendedBytes ?? 0) + cap <= promiseBytes(gpu);
const budgetFits = (shard: ReturningShard, room: ReturnRoom) =>
  room.suspendedBytes + shard.capBytesPerGpu * shard.gpuCount <= room.suspendBudgetBytes;
const allThere = (shard: ReturningShard, room: ReturnRoom) =>
  room.gpus.length === shard.gpuCount && room.gpus.every((gpu) => gpu.missing !== true);

describe('lostShardReturn', () => {
  test('what a return takes again stays within every bound: each GPU resident and promised, the host budget', () => {
    fc.assert(
      fc.property(caseArb, ({ shard, room }) => {
        const back = lostShardReturn(shard, room);
        const cap = shard.capBytesPerGpu;
        // SUSPENDING: its reservation taken again and, its cap in a host RAM state, within the
        // budget.
        if (back.kind === 'suspending') assert.ok(budgetFits(shard, room));
        switch (back.kind) {
          case 'suspending':
          case 'running':
          case 'resuming':
            assert.ok(allThere(shard, room));
            for (const gpu of room.gpus) assert.ok(canReserve(gpu, cap), gpu.uuid);
            break;
          case 'suspended':
            assert.ok(allThere(shard, room));
            for (const gpu of room.gpus) assert.ok(promiseFits(gpu, cap), gpu.uuid);
            assert.ok(budgetFits(shard, room));
            break;
          case 'failed':
            assert.ok(back.reason.length > 0);
            break;
        }
      }),
      { numRuns: 2000 },
    );
  });

  test('fails only when no bound has room for it; prefers staying where its memory is', () => {
    fc.assert(
      fc.property(caseArb, ({ shard, room }) => {
        const back = lostShardReturn(shard, room);
        const cap = shard.capBytesPerGpu;
        const resident = allThere(shard, room) && room.gpus.every((g) => canReserve(g, cap));
        const suspended =
          allThere(shard, room) &&
          room.gpus.every((g) => promiseFits(g, cap)) &&
          budgetFits(shard, room);
        if (shard.memory === 'resident') {
          // Memory on the GPU never goes to host RAM on a return, nor the other way.
          assert.equal(back.kind, resident ? 'running' : 'failed');
        } else if (shard.memory === 'partial') {
          // Half moved: never without a reservation while part of it may still be on a GPU.
          assert.equal(
            back.kind,
            resident ? (budgetFits(shard, room) ? 'suspending' : 'resuming') : 'failed',
            JSON.stringify({ shard, room }),
          );
        } else {
          assert.equal(
            back.kind,
            suspended ? 'suspended' : resident ? 'resuming' : 'failed',
            JSON.stringify({ shard, room }),
          );
        }
      }),
      { numRuns: 2000 },
    );
  });

  test('a return in host RAM keeps a wanted resume, and a reclaimed shard is owed one', () => {
    fc.assert(
      fc.property(caseArb, ({ shard, room }) => {
        const back = lostShardReturn(shard, room);
        if (back.kind !== 'suspended') return;
        assert.equal(back.resumeWanted, shard.resumeWanted || shard.suspendCause === 'reclaim');
      }),
    );
  });

  test('every outcome is a move the lifecycle allows from LOST (cause recovered, or failed)', () => {
    assert.ok(canTransition('LOST', 'RUNNING', 'recovered'));
    assert.ok(canTransition('LOST', 'SUSPENDING', 'recovered'));
    assert.ok(canTransition('LOST', 'SUSPENDED', 'recovered'));
    assert.ok(canTransition('LOST', 'RESUMING', 'recovered'));
    assert.ok(canTransition('LOST', 'FAILED', 'host-back-without-it'));
  });

  describe('examples', () => {
    const gpu = (over: Partial<ReturnGpu> = {}): ReturnGpu => ({
      uuid: 'GPU-0',
      totalBytes: bytes(80 * GiB),
      reservedBytes: bytes(0),
      suspendedBytes: bytes(0),
      overcommitRatio: 1,
      ...over,
    });
    const shard = (over: Partial<ReturningShard> = {}): ReturningShard => ({
      memory: 'suspended',
      capBytesPerGpu: bytes(40 * GiB),
      gpuCount: 1,
      resumeWanted: false,
      suspendCause: 'idle-suspend',
      ...over,
    });
    const room = (over: Partial<ReturnRoom> = {}): ReturnRoom => ({
      gpus: [gpu()],
      suspendBudgetBytes: 100 * GiB,
      suspendedBytes: 0,
      ...over,
    });

    test('room everywhere: back where its memory is', () => {
      assert.deepEqual(lostShardReturn(shard(), room()), {
        kind: 'suspended',
        resumeWanted: false,
      });
      assert.deepEqual(lostShardReturn(shard({ memory: 'partial' }), room()), {
        kind: 'suspending',
      });
      assert.deepEqual(lostShardReturn(shard({ memory: 'resident' }), room()), {
        kind: 'running',
      });
    });

    test("a ratio lowered while it was away: its cap would pass the GPU's promise; the GPU has no room either, so FAILED", () => {
      // 80 GiB at ratio 1, 40 GiB resident and 40 GiB suspended already: one more 40 GiB cap
      // suspended would make 120 GiB of caps on an 80 GiB card.
      const full = room({
        gpus: [gpu({ reservedBytes: bytes(40 * GiB), suspendedBytes: bytes(40 * GiB) })],
      });
      const back = lostShardReturn(shard(), full);
      assert.equal(back.kind, 'failed');
      assert.match(
        (back as { reason: string }).reason,
        /GPU GPU-0 promises 80(\.00)? GiB in all .* and 80(\.00)? GiB of it is taken/,
      );
    });

    test("the host's budget lowered while it was away: back on its GPU when the GPU has room, else FAILED", () => {
      const tight = { suspendBudgetBytes: 50 * GiB, suspendedBytes: 20 * GiB };
      assert.deepEqual(lostShardReturn(shard(), room(tight)), { kind: 'resuming' });
      const back = lostShardReturn(
        shard(),
        room({ ...tight, gpus: [gpu({ reservedBytes: bytes(60 * GiB) })] }),
      );
      assert.equal(back.kind, 'failed');
      assert.match(
        (back as { reason: string }).reason,
        /budget for suspended shards \(GPUSHARDS_SUSPEND_BUDGET\) is 50(\.00)? GiB and 20(\.00)? GiB of it is taken/,
      );
      // A host that no longer suspends at all (budget 0) is the same case.
      assert.deepEqual(lostShardReturn(shard(), room({ suspendBudgetBytes: 0 })), {
        kind: 'resuming',
      });
    });

    test('half moved: SUSPENDING with its reservation when its GPU has room, RESUMING when only the budget lacks it, else FAILED even where SUSPENDED would fit the promise and the budget', () => {
      const half = shard({ memory: 'partial' });
      assert.deepEqual(lostShardReturn(half, room()), { kind: 'suspending' });
      assert.deepEqual(lostShardReturn(half, room({ suspendBudgetBytes: 20 * GiB })), {
        kind: 'resuming',
      });
      // Ratio 2: 60 GiB reserved by others leaves 20 GiB resident for a 40 GiB cap, while the
      // promise (160 GiB) and the budget would take it suspended. What is left of it on the GPU
      // would sit there unreserved: FAILED.
      const crowded = room({
        gpus: [gpu({ reservedBytes: bytes(60 * GiB), overcommitRatio: 2 })],
      });
      assert.equal(lostShardReturn(shard(), crowded).kind, 'suspended');
      const back = lostShardReturn(half, crowded);
      assert.equal(back.kind, 'failed');
      assert.match(
        (back as { reason: string }).reason,
        /half moved to host RAM when its host came back, and its GPUs no longer have room/,
      );
    });

    test('a GPU it lived on missing: FAILED whatever the room', () => {
      const back = lostShardReturn(shard(), room({ gpus: [gpu({ missing: true })] }));
      assert.deepEqual(back, {
        kind: 'failed',
        reason: 'its host came back without GPU GPU-0, where its memory lived',
      });
    });

    test('resident and no room: the reason a resident return has always had', () => {
      const back = lostShardReturn(
        shard({ memory: 'resident' }),
        room({ gpus: [gpu({ reservedBytes: bytes(60 * GiB) })] }),
      );
      assert.deepEqual(back, { kind: 'failed', reason: GPUS_GIVEN_AWAY });
    });

    test('a reclaim victim lost mid-suspend is owed its resume; a wanted resume stays wanted', () => {
      assert.deepEqual(lostShardReturn(shard({ suspendCause: 'reclaim' }), room()), {
        kind: 'suspended',
        resumeWanted: true,
      });
      assert.deepEqual(lostShardReturn(shard({ resumeWanted: true }), room()), {
        kind: 'suspended',
        resumeWanted: true,
      });
    });
  });
});
