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

  it('leaves shards that got a command after the request alone', () => {
    const plan = planReconcile(
      [known('new', 'PULLING'), known('stop-me', 'RUNNING')],
      { desired: [spec('launched-meanwhile')], stoppedShardIds: ['stop-me'] },
      new Set(['new', 'stop-me', 'launched-meanwhile']),
    );
    assert.deepEqual(plan, { launch: [], applyLimits: [], stop: [], remove: [] });
  });
});
