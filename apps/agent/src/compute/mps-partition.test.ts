import assert from 'node:assert/strict';
import { mkdirSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { createServer, type Server } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, before, describe, it } from 'node:test';

import {
  checkMpsPartition,
  isolatedComputePermille,
  isolatedLaunchProblem,
  isolatedPercentProblem,
  mpsPipeDirProblem,
  mpsThreadPercent,
} from './mps-partition.js';

const work = mkdtempSync(join(tmpdir(), 'gpushards-mps-unit-'));
const running = join(work, 'running');
let daemon: Server;

before(async () => {
  mkdirSync(running);
  daemon = createServer((socket) => socket.end());
  await new Promise<void>((resolve) => daemon.listen(join(running, 'control'), resolve));
});
after(async () => {
  await new Promise((resolve) => daemon.close(resolve));
  rmSync(work, { recursive: true, force: true });
});

describe('the MPS partition', () => {
  const partition = { pipeDir: running, isolatedPercent: 40 };

  it('gives an isolated shard its share in whole percent (rounded down, at least 1), any other 100 − P', () => {
    assert.equal(mpsThreadPercent(partition, { sharePermille: 300, mode: 'isolated' }), 30);
    assert.equal(mpsThreadPercent(partition, { sharePermille: 309, mode: 'isolated' }), 30);
    assert.equal(mpsThreadPercent(partition, { sharePermille: 4, mode: 'isolated' }), 1);
    assert.equal(mpsThreadPercent(partition, { sharePermille: 0, mode: 'isolated' }), 1);
    assert.equal(mpsThreadPercent(partition, { sharePermille: 250, mode: 'guaranteed' }), 60);
    assert.equal(mpsThreadPercent(partition, { sharePermille: 900, mode: 'capped' }), 60);
    assert.equal(mpsThreadPercent(partition, undefined), 60);
    assert.equal(isolatedComputePermille(partition), 400);
  });

  it('refuses an isolated launch without a partition or too large for it, and nothing else', () => {
    const isolated = (sharePermille: number) => ({ sharePermille, mode: 'isolated' as const });
    assert.match(
      isolatedLaunchProblem('box-1', undefined, isolated(300)) ?? '',
      /^an isolated shard needs an MPS partition, and host box-1 runs none \(GPUSHARDS_MPS_PIPE_DIR/,
    );
    assert.match(
      isolatedLaunchProblem('box-1', partition, isolated(410)) ?? '',
      /^an isolated shard of 41% does not fit host box-1's MPS partition of 40%$/,
    );
    assert.equal(isolatedLaunchProblem('box-1', partition, isolated(400)), undefined);
    assert.equal(isolatedLaunchProblem('box-1', partition, isolated(409)), undefined, '40.9 → 40');
    for (const host of [undefined, partition]) {
      assert.equal(isolatedLaunchProblem('box-1', host, undefined), undefined);
      assert.equal(
        isolatedLaunchProblem('box-1', host, { sharePermille: 900, mode: 'guaranteed' }),
        undefined,
      );
    }
  });

  it('takes P from 1 to 90 whole percent', () => {
    for (const ok of [1, 40, 90]) assert.equal(isolatedPercentProblem(ok), undefined);
    for (const bad of [0, 91, 100, 12.5, -1, Number.NaN]) {
      assert.match(isolatedPercentProblem(bad) ?? '', /whole percent from 1 to 90/, String(bad));
    }
  });

  it("needs the control daemon's `control` socket in the pipe folder", () => {
    assert.equal(mpsPipeDirProblem(running), undefined);
    assert.match(
      mpsPipeDirProblem(join(work, 'absent')) ?? '',
      /absent does not exist: the MPS control daemon does not seem to run there; start it with CUDA_MPS_PIPE_DIRECTORY=.*absent nvidia-cuda-mps-control -d/,
    );
    const empty = join(work, 'empty');
    mkdirSync(empty);
    assert.match(
      mpsPipeDirProblem(empty) ?? '',
      /empty holds no "control" socket: the MPS control daemon does not seem to run there/,
    );
    const plain = join(work, 'plain');
    mkdirSync(plain);
    writeFileSync(join(plain, 'control'), '');
    assert.match(mpsPipeDirProblem(plain) ?? '', /control is not a socket: the MPS control daemon/);
    writeFileSync(join(work, 'file'), '');
    assert.match(mpsPipeDirProblem(join(work, 'file')) ?? '', /is not a folder/);
  });

  it('checks a partition given in code (createAgent)', () => {
    assert.deepEqual(checkMpsPartition(partition), partition);
    assert.throws(
      () => checkMpsPartition({ pipeDir: running, isolatedPercent: 95 }),
      /mps.isolatedPercent must be a whole percent from 1 to 90, got 95/,
    );
    assert.throws(
      () => checkMpsPartition({ pipeDir: join(work, 'absent'), isolatedPercent: 40 }),
      /mps.pipeDir: .*the MPS control daemon does not seem to run there/,
    );
  });
});
