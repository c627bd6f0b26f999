import assert from 'node:assert/strict';
import {
  closeSync,
  mkdirSync,
  mkdtempSync,
  openSync,
  rmSync,
  writeFileSync,
  writeSync,
} from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, describe, it } from 'node:test';

import { pino } from 'pino';

import type { AgentConfig } from '../config/agent-options.js';
import { buildRegion } from '../testing/region-fixture.js';
import { waitFor } from '../testing/processes.js';
import { DEVICES_OFFSET, DEVICE_FIELDS, HEADER_FIELDS } from './region-layout.js';
import {
  MIN_READ_GAP_MS,
  RegionWatchService,
  type PressureRing,
  type WakeRing,
} from './region-watch.service.js';

const GPU = 'GPU-fa4e5000-0000-4000-8000-000000000000';
const root = mkdtempSync(join(tmpdir(), 'gpushards-region-watch-'));
const config = { regionRoot: root } as AgentConfig;
const watch = new RegionWatchService(config, pino({ level: 'silent' }));
after(() => {
  watch.onModuleDestroy();
  rmSync(root, { recursive: true, force: true });
});

const wakes: WakeRing[] = [];
const pressures: PressureRing[] = [];
watch.onWake((ring) => wakes.push(ring));
watch.onPressure((ring) => pressures.push(ring));

/** What libvgpu.so does: counters through its mapping (here a plain write), then the bell. */
function ring(shardId: string, field: 'wake' | 'pressure', count: bigint, atNs: bigint): void {
  const fd = openSync(join(root, shardId, 'region'), 'r+');
  try {
    const word = Buffer.alloc(8);
    const put = (value: bigint, offset: number) => {
      word.writeBigUInt64LE(value);
      writeSync(fd, word, 0, 8, offset);
    };
    if (field === 'wake') {
      put(count, HEADER_FIELDS.wake_requests.offset);
      put(atNs, HEADER_FIELDS.wake_requested_ns.offset);
    } else {
      put(count, DEVICES_OFFSET + DEVICE_FIELDS.pressure_count.offset);
      put(atNs, DEVICES_OFFSET + DEVICE_FIELDS.pressure_ns.offset);
    }
    put(0n, HEADER_FIELDS.bell.offset);
  } finally {
    closeSync(fd);
  }
}

function region(shardId: string): void {
  mkdirSync(join(root, shardId), { recursive: true });
  writeFileSync(join(root, shardId, 'region'), buildRegion([{ uuid: GPU }]));
}

describe('region bells', () => {
  it('a wake ring and a pressure ring reach their listeners, once per rise', async () => {
    mkdirSync(join(root, 'a'));
    watch.add('a');
    // libvgpu.so creates the file after the agent started watching the folder.
    region('a');
    const now = process.hrtime.bigint();
    ring('a', 'wake', 1n, now);
    const wake = await waitFor('the wake', () => wakes.find((w) => w.shardId === 'a'));
    assert.deepEqual(wake, { shardId: 'a', requests: 1n, atNs: now });
    ring('a', 'pressure', 1n, now);
    const pressure = await waitFor('the pressure', () => pressures.find((p) => p.shardId === 'a'));
    assert.deepEqual(pressure, { shardId: 'a', gpuUuid: GPU, count: 1n, atNs: now });
    ring('a', 'wake', 3n, now + 5n);
    await waitFor('the second wake', () =>
      wakes.some((w) => w.requests === 3n) ? true : undefined,
    );
    assert.equal(wakes.filter((w) => w.shardId === 'a').length, 2);
    assert.equal(pressures.filter((p) => p.shardId === 'a').length, 1, 'no rise, no ring');
    watch.remove('a');
  });

  it('a tenant ringing in a loop costs at most one read per MIN_READ_GAP_MS, and its last count arrives', async () => {
    region('storm');
    watch.add('storm');
    await waitFor('the first read', () => (watch.reads > 0 ? true : undefined));
    const readsBefore = watch.reads;
    const started = performance.now();
    for (let count = 1n; count <= 5000n; count++) ring('storm', 'wake', count, count);
    await waitFor('the last count', () =>
      wakes.some((w) => w.shardId === 'storm' && w.requests === 5000n) ? true : undefined,
    );
    const elapsed = performance.now() - started;
    const reads = watch.reads - readsBefore;
    // Reads are spaced by the gap (plus one that may have started as the loop began).
    assert.ok(
      reads <= Math.floor(elapsed / MIN_READ_GAP_MS) + 2,
      `${reads} reads in ${elapsed.toFixed(0)} ms`,
    );
    assert.ok(
      wakes.filter((w) => w.shardId === 'storm').length <= reads,
      'at most one wake per read',
    );
    watch.remove('storm');
  });

  it('a stale pressure count found on the first read is no ring; a wake that rang while the agent was away is', async () => {
    mkdirSync(join(root, 'back'));
    writeFileSync(
      join(root, 'back', 'region'),
      buildRegion([{ uuid: GPU, pressureCount: 4n, pressureNs: 1n }], undefined, [], {
        wakeRequests: 2n,
        wakeRequestedNs: 7n,
      }),
    );
    watch.sync(['back']);
    const wake = await waitFor('the wake from before', () =>
      wakes.find((w) => w.shardId === 'back'),
    );
    assert.equal(wake.requests, 2n);
    assert.equal(pressures.filter((p) => p.shardId === 'back').length, 0);
    watch.sync([]);
    assert.equal(watch.watching('back'), false);
  });
});
