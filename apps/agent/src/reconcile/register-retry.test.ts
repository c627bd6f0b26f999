import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { REGISTER_RETRY_MAX_MS, registerRetryDelayMs } from './register-retry.js';

describe('registerRetryDelayMs', () => {
  it('backs off exponentially to 30 s, each wait in the upper half of its step', () => {
    const ceilings = [500, 1_000, 2_000, 4_000, 8_000, 16_000, 30_000, 30_000, 30_000];
    for (const [attempt, ceiling] of ceilings.entries()) {
      assert.equal(
        registerRetryDelayMs(attempt, () => 0),
        ceiling / 2,
      );
      assert.equal(
        registerRetryDelayMs(attempt, () => 1),
        ceiling,
      );
      assert.ok(registerRetryDelayMs(attempt) <= REGISTER_RETRY_MAX_MS);
    }
  });

  it('agents that failed together come back spread over the step, not at one moment', () => {
    const draws = [0, 0.25, 0.5, 0.75, 0.999];
    const delays = draws.map((draw) => registerRetryDelayMs(4, () => draw));
    assert.equal(new Set(delays).size, draws.length);
    assert.ok(Math.max(...delays) - Math.min(...delays) >= 3_900);
  });
});
