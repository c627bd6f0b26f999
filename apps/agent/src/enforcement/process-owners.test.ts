import assert from 'node:assert/strict';
import { mkdirSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, describe, it } from 'node:test';

import { containerIdFromCgroup, ProcessOwners } from './process-owners.js';

const ID = 'a'.repeat(12) + '0123456789abcdef'.repeat(3) + 'b'.repeat(4);
const work = mkdtempSync(join(tmpdir(), 'gpushards-owners-'));
after(() => rmSync(work, { recursive: true, force: true }));

describe('containerIdFromCgroup', () => {
  it('reads the container id under both cgroup drivers and versions', () => {
    assert.equal(ID.length, 64);
    assert.equal(containerIdFromCgroup(`0::/system.slice/docker-${ID}.scope\n`), ID);
    assert.equal(containerIdFromCgroup(`12:pids:/docker/${ID}\n0::/docker/${ID}\n`), ID);
    assert.equal(containerIdFromCgroup(`0::/kubepods.slice/cri-containerd-${ID}.scope`), ID);
  });

  it('finds none for a host process or a longer hex run', () => {
    assert.equal(containerIdFromCgroup('0::/user.slice/session-1.scope\n'), undefined);
    assert.equal(containerIdFromCgroup(`0::/x/${ID}ff\n`), undefined);
    assert.equal(containerIdFromCgroup(''), undefined);
  });
});

describe('ProcessOwners', () => {
  it('caches a PID while it is seen and reads it again after it left', () => {
    mkdirSync(join(work, '42'));
    writeFileSync(join(work, '42', 'cgroup'), `0::/docker/${ID}\n`);
    writeFileSync(join(work, '42', 'comm'), 'python3\n');
    const owners = new ProcessOwners(work);
    assert.equal(owners.containerOf(42), ID);
    assert.equal(owners.containerOf(43), null);
    owners.endSample();
    assert.equal(owners.containerOf(42), ID);
    assert.equal(owners.reads, 2, 'PID 42 came from the cache');
    owners.endSample();
    owners.endSample(); // 42 not seen: forgotten
    writeFileSync(join(work, '42', 'cgroup'), '0::/user.slice\n');
    assert.equal(owners.containerOf(42), null);
    assert.equal(owners.commandOf(42), 'python3');
    assert.equal(owners.commandOf(43), undefined);
  });
});
