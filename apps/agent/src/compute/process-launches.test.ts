import assert from 'node:assert/strict';
import { mkdirSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, describe, it } from 'node:test';

import { namespacedProcess, ownLastLaunch } from './process-launches.js';

const proc = mkdtempSync(join(tmpdir(), 'gpushards-process-launches-'));
after(() => rmSync(proc, { recursive: true, force: true }));

function fakeProcess(hostPid: number, nsPids: string, startTime: number, comm = 'python3') {
  const dir = join(proc, String(hostPid));
  mkdirSync(dir, { recursive: true });
  writeFileSync(
    join(dir, 'status'),
    `Name:\t${comm}\nTgid:\t${hostPid}\nNSpid:\t${nsPids}\nPPid:\t1\n`,
  );
  const fields = [
    'S',
    ...Array.from({ length: 18 }, (_, i) => String(i + 4)),
    String(startTime),
    '99',
  ];
  writeFileSync(join(dir, 'stat'), `${hostPid} (${comm}) ${fields.join(' ')}\n`);
}

describe('process launches', () => {
  it("reads a host PID's innermost PID and start time from /proc (a name with spaces and parentheses too)", () => {
    fakeProcess(4242, '4242\t17', 987654, 'a (b) c');
    assert.deepEqual(namespacedProcess(proc, 4242), { nsPid: 17, startTime: 987654n });
    fakeProcess(4243, '4243', 5);
    assert.deepEqual(namespacedProcess(proc, 4243), { nsPid: 4243, startTime: 5n });
    assert.equal(namespacedProcess(proc, 4244), undefined, 'gone');
  });

  it("finds a process's own slot by its namespaced PID and start time, not a reused PID's", () => {
    const slots = [
      { pid: 17, startTime: 111n, lastLaunchSeconds: 900 },
      { pid: 18, startTime: 0n, lastLaunchSeconds: 0 },
    ];
    assert.equal(ownLastLaunch({ nsPid: 17, startTime: 111n }, slots), 901n * 1_000_000_000n - 1n);
    assert.equal(ownLastLaunch({ nsPid: 17, startTime: 222n }, slots), null, 'a reused PID');
    assert.equal(ownLastLaunch({ nsPid: 18, startTime: 5n }, slots), null, 'a slot, no launch');
    assert.equal(ownLastLaunch({ nsPid: 19, startTime: 5n }, slots), null, 'no slot at all');
    assert.equal(ownLastLaunch(undefined, slots), undefined, 'gone');
  });
});
