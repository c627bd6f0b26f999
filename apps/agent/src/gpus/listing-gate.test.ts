import assert from 'node:assert/strict';
import { describe, it } from 'node:test';

import { NvmlBackend } from './gpu-backends.js';
import { RELIST_MS } from './listing-gate.js';
import type { Nvml, NvmlProcess } from './nvml.js';

const GiB = 1024 ** 3;

/** One GPU whose used bytes and processes the test sets; counts the (costly) listings. */
class StubNvml {
  readonly listsProcesses = true;
  usedBytes = 0;
  running: NvmlProcess[] = [];
  listings = 0;

  driverVersion(): string {
    return 'stub';
  }

  cudaVersion(): string {
    return 'stub';
  }

  deviceCount(): number {
    return 1;
  }

  device(index: number) {
    return { index, uuid: 'GPU-0', name: 'Stub GPU', totalBytes: 80 * GiB };
  }

  memory() {
    return {
      totalBytes: 80 * GiB,
      usedBytes: this.usedBytes,
      freeBytes: 80 * GiB - this.usedBytes,
    };
  }

  processes(): NvmlProcess[] {
    this.listings++;
    return this.running;
  }

  /** `pid` holds `bytes` alone on the card. */
  only(pid: number, bytes: number): void {
    this.running = [{ pid, usedBytes: bytes }];
    this.usedBytes = bytes;
  }
}

function setUp() {
  const nvml = new StubNvml();
  const dead = new Set<number>();
  let now = 0;
  const backend = new NvmlBackend(nvml as unknown as Nvml, 'libcuda.so.1', {
    now: () => now,
    alive: (pid) => !dead.has(pid),
  });
  const pids = (watch?: ReadonlySet<number>) => backend.processes(watch)!.map((p) => p.pid);
  return { nvml, dead, backend, pids, advance: (ms: number) => (now += ms) };
}

describe("NvmlBackend's listing gate", () => {
  it("reuses a GPU's listing while its used bytes and processes stay; lists again when its used bytes change", () => {
    const { nvml, pids, advance } = setUp();
    nvml.only(100, 2 * GiB);
    assert.deepEqual(pids(), [100]);
    advance(50);
    assert.deepEqual(pids(), [100]);
    assert.equal(nvml.listings, 1, 'nothing changed: the listing is reused');
    nvml.running = [
      { pid: 100, usedBytes: 2 * GiB },
      { pid: 101, usedBytes: GiB },
    ];
    nvml.usedBytes = 3 * GiB;
    advance(50);
    assert.deepEqual(pids(), [100, 101]);
    assert.equal(nvml.listings, 2);
  });

  it('the race: a process dies and another takes the same bytes within one interval — seen at the next sample', () => {
    const { nvml, dead, pids, advance } = setUp();
    nvml.only(100, 2 * GiB);
    assert.deepEqual(pids(), [100]);
    // Within one interval: 100 exits (its memory freed), 200 takes exactly as much.
    dead.add(100);
    nvml.only(200, 2 * GiB);
    advance(50);
    assert.deepEqual(pids(), [200], 'the used bytes are the same, but 100 is gone');
  });

  it('a process the fence killed lingers (a zombie answers signal 0) while another takes its bytes: its GPU is listed afresh while it is watched', () => {
    const { nvml, pids, advance } = setUp();
    nvml.only(100, 2 * GiB);
    assert.deepEqual(pids(), [100]);
    nvml.only(200, 2 * GiB);
    advance(50);
    assert.deepEqual(pids(new Set([100])), [200]);
  });

  it('memory moved between live processes with the total unchanged is seen once the listing is RELIST_MS old', () => {
    const { nvml, pids, advance } = setUp();
    nvml.running = [
      { pid: 100, usedBytes: 2 * GiB },
      { pid: 101, usedBytes: GiB },
    ];
    nvml.usedBytes = 3 * GiB;
    assert.deepEqual(pids(), [100, 101]);
    nvml.running = [
      { pid: 100, usedBytes: GiB },
      { pid: 101, usedBytes: 2 * GiB },
    ];
    advance(RELIST_MS - 1);
    assert.equal(
      pids().length,
      2,
      'within RELIST_MS the old listing stands (no cheaper signal shows the move)',
    );
    assert.equal(nvml.listings, 1);
    advance(1);
    pids();
    assert.equal(nvml.listings, 2, 'listed again once RELIST_MS old');
  });
});
