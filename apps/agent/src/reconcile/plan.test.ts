import assert from 'node:assert/strict';
import { describe, it } from 'node:test';

import type { ShardLaunchSpec } from '@gpushards/protocol';

import { planReconcile, type KnownShard } from './plan.js';

const spec = (shardId: string): ShardLaunchSpec => ({
  shardId,
  teamId: 'team-a',
  name: shardId,
  image: 'busybox:latest',
  env: {},
  gpus: [{ uuid: 'GPU-0', limitBytes: 1024 }],
});
const known = (shardId: string, state: KnownShard['state']): KnownShard => ({ shardId, state });
const ids = (specs: readonly ShardLaunchSpec[]) => specs.map((s) => s.shardId);

describe('planReconcile', () => {
  it('launches desired shards the agent has no trace of, and re-applies caps of running ones', () => {
    const plan = planReconcile(
      [known('running', 'RUNNING'), known('exited', 'EXITED'), known('failed', 'FAILED')],
      {
        desired: [spec('running'), spec('exited'), spec('failed'), spec('missing')],
        stoppedShardIds: [],
      },
      new Set(),
    );
    assert.deepEqual(ids(plan.launch), ['missing']);
    assert.deepEqual(ids(plan.applyLimits), ['running']);
    assert.deepEqual(plan.stop, []);
    assert.deepEqual(plan.remove, []);
  });

  it('stops shards that must stay stopped, keeps stopped ones, removes unlisted ones', () => {
    const plan = planReconcile(
      [
        known('run-stop', 'RUNNING'),
        known('pull-stop', 'PULLING'),
        known('stopped', 'STOPPED'),
        known('stray', 'RUNNING'),
        known('gone', 'VANISHED'),
      ],
      { desired: [], stoppedShardIds: ['run-stop', 'pull-stop', 'stopped', 'never-seen'] },
      new Set(),
    );
    assert.deepEqual(plan.stop, ['run-stop', 'pull-stop']);
    assert.deepEqual(plan.remove, ['stray', 'gone']);
    assert.deepEqual(ids(plan.launch), []);
  });

  it('leaves kept shards as they are (their spec could not be given), and removes the unlisted', () => {
    const plan = planReconcile(
      [
        { shardId: 'kept-running', state: 'RUNNING', observed: 'running' },
        { shardId: 'kept-paused', state: 'RUNNING', observed: 'paused' },
        { shardId: 'stray', state: 'RUNNING', observed: 'running' },
      ],
      {
        desired: [spec('other')],
        stoppedShardIds: [],
        keptShardIds: ['kept-running', 'kept-paused'],
      },
      new Set(),
    );
    assert.deepEqual(plan, {
      launch: [spec('other')],
      applyLimits: [],
      unpause: [],
      stop: [],
      discard: [],
      remove: ['stray'],
      suspend: [],
      resume: [],
    });
  });

  it('leaves shards that got a command after the request alone', () => {
    const plan = planReconcile(
      [known('new', 'PULLING'), known('stop-me', 'RUNNING')],
      { desired: [spec('launched-meanwhile')], stoppedShardIds: ['stop-me'] },
      new Set(['new', 'stop-me', 'launched-meanwhile']),
    );
    assert.deepEqual(plan, {
      launch: [],
      applyLimits: [],
      unpause: [],
      stop: [],
      discard: [],
      remove: [],
      suspend: [],
      resume: [],
    });
  });

  it('launches afresh a desired shard whose container was created but never started (the agent died in between)', () => {
    const adopted: KnownShard = { shardId: 'created', state: 'EXITED', observed: 'created' };
    const plan = planReconcile(
      [adopted, { shardId: 'exited', state: 'EXITED', observed: 'exited' }],
      { desired: [spec('created'), spec('exited')], stoppedShardIds: [] },
      new Set(),
    );
    assert.deepEqual(ids(plan.launch), ['created']);
    // An exited container is the control plane's to settle: not restarted.
    assert.deepEqual(plan.stop, []);
  });

  it('unpauses paused shards that should run, stops paused ones that should not, removes dead containers', () => {
    const plan = planReconcile(
      [
        { shardId: 'paused-run', state: 'RUNNING', observed: 'paused' },
        { shardId: 'paused-stop', state: 'RUNNING', observed: 'paused' },
        { shardId: 'dead', state: 'RUNNING', observed: 'dead' },
        { shardId: 'exited-stop', state: 'RUNNING', observed: 'exited' },
      ],
      { desired: [spec('paused-run')], stoppedShardIds: ['paused-stop', 'dead', 'exited-stop'] },
      new Set(),
    );
    assert.deepEqual(plan.unpause, ['paused-run']);
    assert.deepEqual(plan.stop, ['paused-stop']);
    assert.deepEqual(plan.discard, ['dead']);
    assert.deepEqual(ids(plan.launch), []);
  });

  it('moves memory toward the reply: suspendedShardIds to host RAM, desired back to the GPU; a partial move is finished in the direction asked', () => {
    const running = (shardId: string, memory?: KnownShard['memory']): KnownShard => ({
      shardId,
      state: 'RUNNING',
      observed: 'running',
      ...(memory !== undefined ? { memory } : {}),
    });
    const plan = planReconcile(
      [
        running('stay-resident'),
        running('resume', 'suspended'),
        running('finish-resume', 'partial'),
        running('suspend', 'resident'),
        running('finish-suspend', 'partial'),
        running('stay-suspended', 'suspended'),
        running('unsaid'),
      ],
      {
        desired: [spec('stay-resident'), spec('resume'), spec('finish-resume')],
        stoppedShardIds: [],
        suspendedShardIds: ['suspend', 'finish-suspend', 'stay-suspended', 'unsaid'],
      },
      new Set(),
    );
    assert.deepEqual(plan.resume, ['resume', 'finish-resume']);
    assert.deepEqual(plan.suspend, ['suspend', 'finish-suspend', 'unsaid']);
    assert.deepEqual(plan.remove, [], 'a suspended shard is not one the control plane forgot');
    assert.deepEqual(ids(plan.applyLimits), ['stay-resident', 'resume', 'finish-resume']);
  });

  it('never launches a shard listed in suspendedShardIds, whatever the agent knows of it', () => {
    const plan = planReconcile(
      [
        { shardId: 'gone', state: 'VANISHED', observed: 'absent' },
        { shardId: 'exited', state: 'EXITED', observed: 'exited' },
        { shardId: 'created', state: 'EXITED', observed: 'created' },
        { shardId: 'paused', state: 'RUNNING', observed: 'paused' },
        { shardId: 'dead', state: 'RUNNING', observed: 'dead' },
        { shardId: 'commanded', state: 'RUNNING', observed: 'running' },
      ],
      {
        desired: [],
        stoppedShardIds: [],
        suspendedShardIds: ['gone', 'exited', 'created', 'paused', 'dead', 'unknown', 'commanded'],
      },
      new Set(['commanded']),
    );
    assert.deepEqual(ids(plan.launch), []);
    assert.deepEqual(plan.remove, []);
    assert.deepEqual(plan.unpause, ['paused']);
    assert.deepEqual(plan.discard, ['dead']);
    assert.deepEqual(
      plan.suspend,
      [],
      'a shard commanded since the request waits for the next round',
    );
  });
});
