import assert from 'node:assert/strict';
import { describe, it } from 'node:test';

import { ipcRefusal, liveImporters, type ContainerProcess } from './ipc-imports.js';

const live: ContainerProcess[] = [
  { hostPid: 4001, nsPid: 7, startTime: 700n },
  { hostPid: 4002, nsPid: 8, startTime: 800n },
  { hostPid: 4003, nsPid: 9, startTime: 0n },
];

describe('CUDA IPC imports in a region', () => {
  it('counts a marked slot only when a live process of the container is the one it names', () => {
    const importers = (...slots: [number, bigint][]) => ({
      importers: slots.map(([pid, startTime]) => ({ pid, startTime, lastLaunchSeconds: 0 })),
      unlisted: false,
    });
    assert.deepEqual(liveImporters(importers([7, 700n]), live), [live[0]]);
    // The pid reused by a new process: another start time.
    assert.deepEqual(liveImporters(importers([8, 799n]), live), []);
    // A start time unknown on either side: the pid decides.
    assert.deepEqual(liveImporters(importers([8, 0n], [9, 900n]), live), [live[1], live[2]]);
    // No live process of that pid (the importer was SIGKILLed, its slot not yet reclaimed).
    assert.deepEqual(liveImporters(importers([12, 1200n]), live), []);
  });

  it('says why, what it means and what to do; nothing when nothing stands in the way', () => {
    const none = { importers: [], unlisted: false };
    assert.equal(ipcRefusal('s', none, []), undefined);
    const two = ipcRefusal('s', none, live.slice(0, 2))!;
    assert.match(
      two,
      /^shard s cannot be suspended: processes 4001 \(pid 7 in its container\), 4002 \(pid 8 in its container\) hold GPU memory another process shared with it/,
    );
    assert.match(two, /cuIpcOpenMemHandle/);
    assert.match(two, /cuMemImportFromShareableHandle/);
    assert.match(two, /To make it suspendable, close those imports/);
    const unlisted = ipcRefusal('s', { importers: [], unlisted: true }, [])!;
    assert.match(unlisted, /more than 256 of its processes used CUDA/);
    assert.match(unlisted, /until the shard restarts/);
  });
});
