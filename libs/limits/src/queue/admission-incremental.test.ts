import { describe, test } from 'node:test';
import assert from 'node:assert/strict';
import fc from 'fast-check';
import { bytes, GiB } from '../sizes.js';
import {
  elasticScenarioArb,
  IndexedFleet,
  scenarioArb,
  withShards,
  type ElasticScenario,
} from '../testing/queue-arbitraries.js';
import { admit, admitWholePass, type AdmissionInput } from './admission.js';
import type { HeldShard, PendingShard } from './model.js';

const RUNS = 400;

function inputOf(
  s: ElasticScenario | (Omit<ElasticScenario, 'suspended'> & { suspended?: undefined }),
): AdmissionInput {
  return {
    fleet: s.fleet,
    held: s.held,
    pending: s.pending,
    ...(s.suspended === undefined ? {} : { suspended: s.suspended }),
    teams: s.teams,
    now: s.now,
    options: s.options,
  };
}

/**
 * A queue behind a fleet its held shards fill, then freeing events one at a time: the plan is
 * applied (placements hold their GPUs, the rest wait), a held shard chosen by `pick` ends, and
 * the next pass is decided both ways (admit() on the fleet as a fleet cache keeps it, with its
 * RoomIndex). Each step's two plans must be equal.
 */
function stepsAgree(start: AdmissionInput, picks: readonly number[]): void {
  let input = start;
  const indexed = new IndexedFleet(start.fleet);
  for (const pick of picks) {
    indexed.follow(input.fleet);
    const fast = admit({ ...input, fleet: indexed.hosts, roomIndex: indexed.index });
    assert.deepEqual(fast, admitWholePass(input));
    const placedIds = new Set(fast.placements.map((p) => p.shardId));
    const gone = new Set([...placedIds, ...fast.expired]);
    const newlyHeld: HeldShard[] = fast.placements.map((p, i) => {
      const shard = input.pending.find((s) => s.id === p.shardId)!;
      return {
        id: shard.id,
        teamId: shard.teamId,
        hostId: p.placed.hostId,
        gpuUuids: p.placed.gpuUuids,
        reservedBytesPerGpu: p.placed.reservedBytesPerGpu,
        quotaBytes: bytes(shard.request.bytesPerGpu * shard.request.gpuCount),
        gpuModel:
          input.fleet
            .find((h) => h.id === p.placed.hostId)
            ?.gpus.find((g) => g.uuid === p.placed.gpuUuids[0])?.model ?? '',
        priorityRank: shard.priorityRank,
        preemptible: shard.preemptible,
        placedAt: input.now + i,
        leaving: false,
      };
    });
    let fleet = withShards(
      input.fleet,
      fast.placements.map((p) => p.placed),
      1,
    );
    let held = [...input.held, ...newlyHeld];
    // The freeing event: one shard that holds capacity ends.
    const staying = held.filter((s) => !s.leaving);
    if (staying.length > 0) {
      const ended = staying[pick % staying.length]!;
      fleet = withShards(fleet, [ended], -1);
      held = held.filter((s) => s.id !== ended.id);
    }
    const pending: PendingShard[] = input.pending.filter(
      (s) => !gone.has(s.id) && !fast.resumes.some((r) => r.shardId === s.id),
    );
    input = { ...input, fleet, held, pending, now: input.now + 1 };
  }
}

/** Hosts whose every GPU is (nearly) full: the deep queue behind them meets a full fleet. */
function filled(s: ElasticScenario): ElasticScenario {
  return {
    ...s,
    fleet: s.fleet.map((host) => ({
      ...host,
      gpus: host.gpus.map((gpu) => ({
        ...gpu,
        reservedBytes: bytes(Math.max(gpu.reservedBytes, gpu.totalBytes - 2 * GiB)),
      })),
    })),
  };
}

describe('admission: the shortcuts answer as the whole pass', () => {
  test('on random queues, teams and fleets', () => {
    fc.assert(
      fc.property(scenarioArb, (s) => {
        assert.deepEqual(admit(inputOf(s)), admitWholePass(inputOf(s)));
      }),
      { numRuns: RUNS },
    );
  });

  test('with elastic memory: suspended shards, make-room, reclaim-as-suspend, wanted resumes', () => {
    fc.assert(
      fc.property(elasticScenarioArb, (s) => {
        assert.deepEqual(admit(inputOf(s)), admitWholePass(inputOf(s)));
      }),
      { numRuns: RUNS },
    );
  });

  test('behind a full fleet, over a run of freeing events', () => {
    fc.assert(
      fc.property(
        elasticScenarioArb,
        fc.boolean(),
        fc.array(fc.nat(), { minLength: 1, maxLength: 6 }),
        (s, full, picks) => {
          stepsAgree(inputOf(full ? filled(s) : s), picks);
        },
      ),
      { numRuns: RUNS },
    );
  });
});
