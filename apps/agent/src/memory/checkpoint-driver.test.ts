import assert from 'node:assert/strict';
import { execFileSync } from 'node:child_process';
import { mkdirSync, mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, describe, it } from 'node:test';

import type { AgentConfig } from '../config/agent-options.js';
import { resolveSuspendBudget } from '../create-agent.js';
import { REPO_ROOT } from '../testing/paths.js';
import {
  CheckpointCallError,
  CheckpointUnavailableError,
  meaningOf,
  openCheckpointApi,
} from './checkpoint-driver.js';
import { suspendCapability } from './suspend-capability.js';

const work = mkdtempSync(join(tmpdir(), 'gpushards-checkpoint-'));
after(() => rmSync(work, { recursive: true, force: true }));

/** The stub libcuda, with or without the checkpoint API. */
function stub(withCheckpoint: boolean): string {
  const library = join(work, withCheckpoint ? 'with' : 'without', 'libcuda.so.1');
  mkdirSync(join(library, '..'), { recursive: true });
  execFileSync('cc', [
    '-shared',
    '-fPIC',
    ...(withCheckpoint ? ['-DWITH_CHECKPOINT'] : []),
    '-o',
    library,
    join(REPO_ROOT, 'apps/agent/src/testing/checkpoint-stub.c'),
  ]);
  return library;
}

const config = (overrides: Partial<AgentConfig>) =>
  ({ suspendBudgetBytes: 1024, ...overrides }) as AgentConfig;

describe("what a driver's refusal means", () => {
  it('a restore answered CUDA_ERROR_INVALID_VALUE names CUDA IPC (what an H200 does), other calls an unknown process', () => {
    assert.match(meaningOf('restore', 'CUDA_ERROR_INVALID_VALUE'), /CUDA IPC .*only restarting/);
    assert.match(meaningOf('checkpoint', 'CUDA_ERROR_INVALID_VALUE'), /does not know this process/);
    assert.match(meaningOf('restore', 'CUDA_ERROR_NOT_FOUND'), /does not know this process/);
  });
});

describe('the checkpoint API through koffi', () => {
  it('reads states, passes the lock timeout in CUcheckpointLockArgs, and names what the driver refused', async () => {
    const api = openCheckpointApi(stub(true));
    assert.deepEqual(await Promise.all([101, 102, 103, 104, 7].map((pid) => api.state(pid))), [
      'running',
      'locked',
      'checkpointed',
      'failed',
      undefined,
    ]);
    await api.lock(101, 1234);
    await assert.rejects(api.lock(101, 5), (error: unknown) => {
      assert.ok(error instanceof CheckpointCallError);
      assert.equal(error.errorName, 'CUDA_ERROR_NOT_READY');
      assert.equal(error.code, 600);
      assert.match(
        error.message,
        /^cuCheckpointProcessLock\(pid 101\) returned CUDA_ERROR_NOT_READY \(device not ready\): the process did not let go of the GPU in time/,
      );
      return true;
    });
    await api.checkpoint(101);
    await assert.rejects(api.checkpoint(99), /CUDA_ERROR_NOT_SUPPORTED .*does not support/);
    await api.restore(101);
    await api.unlock(101);
  });

  it('a driver without the checkpoint API: the host registers 0 and says why', () => {
    const library = stub(false);
    assert.throws(
      () => openCheckpointApi(library),
      (error: unknown) =>
        error instanceof CheckpointUnavailableError &&
        /has no cuCheckpointProcessGetState: its checkpoint API needs driver 570 or newer/.test(
          error.message,
        ),
    );
    const capability = suspendCapability(config({ gpus: { kind: 'nvml', cudaLibrary: library } }));
    assert.equal(capability.kind, 'unavailable');
    assert.match(
      capability.kind === 'unavailable' ? capability.reason : '',
      /libcuda\.so\.1 has no cuCheckpointProcessGetState/,
    );
  });

  it('suspends off (a budget of 0) or GPUs without a driver: unavailable, with the reason', () => {
    const off = suspendCapability(
      config({ suspendBudgetBytes: 0, gpus: { kind: 'nvml', cudaLibrary: stub(true) } }),
    );
    assert.deepEqual(off, {
      kind: 'unavailable',
      reason: 'suspends are turned off on this host (GPUSHARDS_SUSPEND_BUDGET=0)',
    });
    const listed = suspendCapability(config({ gpus: { kind: 'simulated', gpus: [] } }));
    assert.match(listed.kind === 'unavailable' ? listed.reason : '', /without the fake driver/);
    const available = suspendCapability(
      config({ gpus: { kind: 'nvml', cudaLibrary: stub(true) } }),
    );
    assert.equal(available.kind, 'available');
    assert.equal(available.kind === 'available' ? available.budgetBytes : 0, 1024);
  });

  it('the budget: a size as given, or a percent of the host RAM; 50 % by default', () => {
    const host = 100 * 1024 ** 3;
    assert.equal(resolveSuspendBudget(undefined, host), 50 * 1024 ** 3);
    assert.equal(resolveSuspendBudget({ percentOfRam: 12.5 }, host), 12.5 * 1024 ** 3);
    assert.equal(resolveSuspendBudget({ bytes: 7 }, host), 7);
    assert.equal(resolveSuspendBudget({ bytes: 0 }, host), 0);
    assert.throws(() => resolveSuspendBudget({ percentOfRam: 101 }, host), /from 0 to 100/);
    assert.throws(() => resolveSuspendBudget({ bytes: -1 }, host), /whole number of bytes/);
  });
});
