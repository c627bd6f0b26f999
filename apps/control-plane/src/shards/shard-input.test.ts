import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { nextShardState } from '../fleet/fleet.service.js';
import { CreateAdmission } from './create-admission.js';
import { imageReferenceProblem } from './shard-input.js';

describe('image references', () => {
  it('accepts what docker pull accepts', () => {
    for (const image of [
      'ubuntu',
      'ubuntu:22.04',
      'library/ubuntu',
      'nvcr.io/nvidia/pytorch:24.05-py3',
      'ghcr.io/org/team/trainer:1.2.3',
      'localhost:5000/trainer',
      'registry.example.com:443/a_b/c__d/e-f.g:Tag_1',
      'UPPER.example.com/lower/path:latest',
      `ubuntu@sha256:${'a'.repeat(64)}`,
      `ghcr.io/org/x:1@sha256:${'0'.repeat(64)}`,
      '[::1]:5000/trainer',
    ]) {
      assert.equal(imageReferenceProblem(image), undefined, image);
    }
  });

  it('refuses everything else, and long input without reading it all', () => {
    for (const image of [
      '',
      'Ubuntu',
      'ubuntu:',
      'ubuntu::1',
      'ubuntu:-tag',
      '-ubuntu',
      'ubuntu/',
      '/ubuntu',
      'a//b',
      'ubuntu@sha256:abc',
      'ubuntu latest',
      "x'; DROP TABLE shard; --",
      'ubuntu:$(reboot)',
      `ubuntu:${'t'.repeat(129)}`,
      `${'a/'.repeat(130)}b`,
    ]) {
      assert.notEqual(imageReferenceProblem(image), undefined, image);
    }
    assert.match(
      imageReferenceProblem('a'.repeat(1024 * 1024)) ?? '',
      /at most 512 characters, got 1048576/,
    );
  });
});

describe('shard state from agent reports', () => {
  it('follows the state machine; a stopping shard ends STOPPED however it ended', () => {
    assert.equal(nextShardState('PLACED', 'PULLING'), 'STARTING');
    assert.equal(nextShardState('STARTING', 'RUNNING'), 'RUNNING');
    assert.equal(nextShardState('LOST', 'RUNNING'), 'RUNNING');
    assert.equal(nextShardState('RUNNING', 'EXITED'), 'EXITED');
    assert.equal(nextShardState('RUNNING', 'VANISHED'), 'FAILED');
    for (const reported of ['EXITED', 'FAILED', 'STOPPED', 'VANISHED'] as const) {
      assert.equal(nextShardState('STOPPING', reported), 'STOPPED', reported);
    }
    assert.equal(nextShardState('STOPPING', 'RUNNING'), undefined);
    assert.equal(nextShardState('RUNNING', 'STARTING'), undefined);
    for (const finished of ['STOPPED', 'EXITED', 'FAILED', 'DELETED'] as const) {
      assert.equal(nextShardState(finished, 'RUNNING'), undefined, finished);
    }
  });
});

describe('create admission', () => {
  it('runs one job per team at a time and at most `limit` at once', async () => {
    const admission = new CreateAdmission(2);
    let running = 0;
    let most = 0;
    const perTeam = new Map<string, number>();
    const order: string[] = [];
    const job = (team: string, label: string) =>
      admission.run(team, async () => {
        running++;
        perTeam.set(team, (perTeam.get(team) ?? 0) + 1);
        most = Math.max(most, running);
        assert.equal(perTeam.get(team), 1, `one ${team} job at a time`);
        await new Promise((resolve) => setTimeout(resolve, 5));
        order.push(label);
        perTeam.set(team, perTeam.get(team)! - 1);
        running--;
        return label;
      });
    const results = await Promise.all([
      job('a', 'a1'),
      job('a', 'a2'),
      job('b', 'b1'),
      job('c', 'c1'),
      job('a', 'a3'),
    ]);
    assert.deepEqual(results, ['a1', 'a2', 'b1', 'c1', 'a3']);
    assert.equal(most, 2);
    assert.ok(
      order.indexOf('a1') < order.indexOf('a2') && order.indexOf('a2') < order.indexOf('a3'),
    );
  });

  it('a failing job lets the next one of its team run', async () => {
    const admission = new CreateAdmission(1);
    await assert.rejects(
      admission.run('a', () => Promise.reject(new Error('boom'))),
      /boom/,
    );
    assert.equal(await admission.run('a', async () => 'next'), 'next');
  });
});
