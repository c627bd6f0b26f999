import 'reflect-metadata';
import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import type { PrismaService } from '../database/index.js';
import type { Logger } from '../logging/logger.js';
import { gate } from '../testing/held-calls.js';
import { FleetCache } from './fleet-cache.js';
import { QueueSignal } from './queue-signal.js';

/**
 * The cache against reads that overlap this process's commits. The reader is scripted (each
 * query answers the next scripted value, possibly after a gate), so that a read can be made to
 * see the database as it was before a commit and to answer after that commit was applied.
 */

const GiB = 2 ** 30;
const UUID = 'GPU-cache-0';

function scriptedReader(answers: (() => Promise<unknown>)[]): PrismaService {
  const reader = {
    $queryRaw: () => {
      const next = answers.shift();
      if (next === undefined) throw new Error('no scripted answer left');
      return next();
    },
  };
  // The cache reads through prisma.direct; either way the next scripted answer comes.
  return { ...reader, direct: reader } as unknown as PrismaService;
}

const silent = {
  child: () => silent,
  error: () => undefined,
  warn: () => undefined,
  info: () => undefined,
  debug: () => undefined,
} as unknown as Logger;

/** The whole read: one host with one 80 GiB GPU holding `reserved` bytes. */
function wholeRead(reserved: number): (() => Promise<unknown>)[] {
  return [
    async () => [{ rows: [['h1', 'h1', 'ONLINE', {}, 512 * 2 ** 20]], count: 1, changedAt: 't' }],
    // uuid, host, index, model, total, reserved, ratio, compute, pool, isolated, suspended, unowned
    async () => [{ rows: [[UUID, 'h1', 0, 'QGPU', 80 * GiB, reserved, 1, 0, 0, 0, 0, 0]] }],
  ];
}

function reservationsRead(reserved: number, after?: Promise<void>): () => Promise<unknown> {
  return async () => {
    const answer = [{ hosts: 1, changedAt: 't', reserved: { [UUID]: reserved }, compute: null }];
    await after;
    return answer;
  };
}

function reservedOf(cache: FleetCache): number {
  return cache.hosts()[0]!.gpus[0]!.reservedBytes;
}

describe('FleetCache', () => {
  it('a periodic read that began before a commit of this process does not undo it', async () => {
    const late = gate();
    const signal = new QueueSignal();
    const cache = new FleetCache(
      scriptedReader([...wholeRead(79 * GiB), reservationsRead(79 * GiB, late.opened)]),
      signal,
      silent,
    );
    await cache.refreshedSince(performance.now());
    assert.equal(reservedOf(cache), 79 * GiB);
    const reading = cache.refreshReservations();
    // A delete commits while the read is under way: its release is applied at once.
    cache.applyCommitted([{ uuid: UUID, bytes: -79 * GiB }]);
    late.open();
    await reading;
    assert.equal(reservedOf(cache), 0, 'the release stays: the read predates it');
  });

  it('a read that finds room freed elsewhere wakes the queue; one that finds none does not', async () => {
    const signal = new QueueSignal();
    let wakes = 0;
    signal.onFreed(() => wakes++);
    const cache = new FleetCache(
      scriptedReader([
        ...wholeRead(79 * GiB),
        reservationsRead(79 * GiB),
        reservationsRead(40 * GiB),
      ]),
      signal,
      silent,
    );
    await cache.refreshedSince(performance.now());
    await cache.refreshReservations();
    assert.equal(wakes, 0);
    await cache.refreshReservations();
    assert.equal(reservedOf(cache), 40 * GiB);
    assert.equal(wakes, 1, 'another control plane freed 39 GiB');
  });
});
