#!/usr/bin/env node
// The multi-host end-to-end suite: nats-server with per-agent nkey users, PostgreSQL, two
// control planes, three agents with different simulated GPUs, the Docker engine; every check
// through GraphQL, Docker and SQL. Prints one line per check and ends with `N passed, N failed`.
//   node test/e2e/dist/run.js        (GPUSHARDS_E2E_KEEP=1 keeps the logs folder)
import { faultChecks } from './scenarios/faults.js';
import { fleetChecks } from './scenarios/fleet.js';
import { killAllGroups } from './support/processes.js';
import { Runner } from './support/runner.js';
import { System } from './support/system.js';
import { World } from './support/world.js';

/** The suite's own deadline: what is left after it is reported as not run. */
const SUITE_DEADLINE_MS = Number(process.env.GPUSHARDS_E2E_DEADLINE_MS ?? 9 * 60_000);

async function main(): Promise<number> {
  const started = Date.now();
  const system = new System();
  const world = new World(system);
  const runner = new Runner();
  runner.afterEach = async (ok) => {
    await system.ensureUp();
    if (!ok) await world.rebase();
  };
  fleetChecks(runner, world);
  faultChecks(runner, world);

  let closing = false;
  const emergency = (signal: NodeJS.Signals) => {
    if (closing) return;
    closing = true;
    console.log(`\n${signal}: stopping everything this run started`);
    void system.close({ keepWorkDir: true }).finally(() => {
      killAllGroups();
      process.exit(130);
    });
  };
  process.once('SIGINT', emergency);
  process.once('SIGTERM', emergency);
  process.once('exit', killAllGroups);

  console.log(`e2e run ${system.runId}: logs in ${system.workDir}/logs`);
  let setupOk = false;
  const setupStarted = Date.now();
  try {
    await system.start();
    setupOk = true;
    console.log(`system up in ${((Date.now() - setupStarted) / 1000).toFixed(1)}s`);
  } catch (error) {
    runner.report({ name: 'the system starts', ok: false, seconds: 0, error });
    runner.failRemaining(new Error('not run: the system did not start'));
  }
  if (setupOk) await runner.runAll(started + SUITE_DEADLINE_MS);

  const { passed, failed } = runner.summary();
  const keep = failed > 0 || process.env.GPUSHARDS_E2E_KEEP === '1';
  if (keep) await saveLogs(system);
  closing = true;
  try {
    await system.close({ keepWorkDir: keep });
  } catch (error) {
    console.log(`cleanup: ${error instanceof Error ? error.message : String(error)}`);
    if (error instanceof AggregateError)
      for (const e of error.errors) console.log(`  ${String(e)}`);
  }
  killAllGroups();
  console.log(`e2e: ${((Date.now() - started) / 1000).toFixed(1)}s`);
  console.log(`${passed} passed, ${failed} failed`);
  return failed === 0 ? 0 : 1;
}

/** On failure the logs stay (the rest of the work folder is removed by close only when kept=false). */
async function saveLogs(system: System): Promise<void> {
  console.log(`logs kept in ${system.workDir}/logs`);
}

main().then(
  (code) => process.exit(code),
  (error: unknown) => {
    console.error(error);
    killAllGroups();
    console.log('0 passed, 1 failed');
    process.exit(1);
  },
);
