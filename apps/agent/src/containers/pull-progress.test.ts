import assert from 'node:assert/strict';
import { describe, it } from 'node:test';

import { PullProgressTracker } from './pull-progress.js';

const A = 'aaaaaaaaaaaa';
const B = 'bbbbbbbbbbbb';

describe('PullProgressTracker', () => {
  it('adds up the layers, with a total once every size is known', () => {
    const tracker = new PullProgressTracker();
    tracker.apply({ status: 'Pulling from team/app', id: 'v1' });
    tracker.apply({ status: 'Pulling fs layer', id: A });
    tracker.apply({ status: 'Pulling fs layer', id: B });
    tracker.apply({ status: 'Downloading', id: A, progressDetail: { current: 100, total: 1000 } });
    assert.deepEqual(tracker.progress(), { completedBytes: 100 });
    tracker.apply({ status: 'Downloading', id: B, progressDetail: { current: 50, total: 500 } });
    assert.deepEqual(tracker.progress(), { completedBytes: 150, totalBytes: 1500 });
    tracker.apply({ status: 'Download complete', id: A });
    tracker.apply({ status: 'Already exists', id: 'cccccccccccc' });
    assert.deepEqual(tracker.progress(), { completedBytes: 1050, totalBytes: 1500 });
  });

  it("returns Docker's error text", () => {
    const tracker = new PullProgressTracker();
    assert.equal(
      tracker.apply({ error: 'x', errorDetail: { message: 'manifest unknown' } }),
      'manifest unknown',
    );
    assert.equal(tracker.apply({ error: 'denied' }), 'denied');
  });
});
