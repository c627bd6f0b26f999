import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { PassRunner } from './pass-runner.js';

/** A pass that waits until the test lets it end; counts how many started. */
function gatedPasses() {
  const gates: (() => void)[] = [];
  let started = 0;
  const pass = () =>
    new Promise<number>((resolve) => {
      const n = ++started;
      gates.push(() => resolve(n));
    });
  return {
    pass,
    started: () => started,
    finish: () => gates.shift()!(),
  };
}

const turn = () => new Promise((resolve) => setImmediate(resolve));

describe('PassRunner', () => {
  it('a trigger during a pass asked for with runNow makes one more pass after it', async () => {
    const passes = gatedPasses();
    const runner = new PassRunner(passes.pass, (error) => assert.fail(String(error)));
    const now = runner.runNow();
    await turn();
    assert.equal(passes.started(), 1);
    runner.trigger(); // capacity freed while the pass ran: it may not have seen it
    runner.trigger(); // coalesced with the one above
    passes.finish();
    assert.equal(await now, 1);
    await turn();
    assert.equal(passes.started(), 2, 'the trigger made a second pass');
    passes.finish();
    await runner.stop();
    assert.equal(passes.started(), 2, 'two triggers in one pass make one more, not two');
  });

  it('a trigger during a triggered pass makes one more; none without a trigger', async () => {
    const passes = gatedPasses();
    const runner = new PassRunner(passes.pass, (error) => assert.fail(String(error)));
    runner.trigger();
    await turn();
    runner.trigger();
    passes.finish();
    await turn();
    assert.equal(passes.started(), 2);
    passes.finish();
    await turn();
    await runner.stop();
    assert.equal(passes.started(), 2);
  });

  it('runNow waits for the running pass, then runs its own', async () => {
    const passes = gatedPasses();
    const runner = new PassRunner(passes.pass, (error) => assert.fail(String(error)));
    runner.trigger();
    await turn();
    const now = runner.runNow();
    await turn();
    assert.equal(passes.started(), 1, 'runNow does not overlap the running pass');
    passes.finish();
    await turn();
    assert.equal(passes.started(), 2);
    passes.finish();
    assert.equal(await now, 2);
    await runner.stop();
  });

  it('a failed pass is reported and the next trigger runs again; nothing after stop', async () => {
    const errors: unknown[] = [];
    let calls = 0;
    const runner = new PassRunner(
      async () => {
        calls++;
        if (calls === 1) throw new Error('boom');
        return calls;
      },
      (error) => errors.push(error),
    );
    runner.trigger();
    await runner.stop().then(() => undefined);
    assert.equal(errors.length, 1);
    runner.trigger();
    await turn();
    assert.equal(calls, 1, 'stopped: no pass');
  });
});
