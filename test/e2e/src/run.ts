#!/usr/bin/env node
// The multi-host end-to-end suite: nats-server with per-agent nkey users, PostgreSQL, two
// control planes, three agents with different simulated GPUs, the Docker engine; every check
// through GraphQL, Docker and SQL. Prints one line per check and ends with `N passed, N failed`.
//   node test/e2e/dist/run.js   (GPUSHARDS_E2E_KEEP=1 keeps the whole work folder; after a
//   failure the logs are copied to test/e2e/logs/<run>)
import { cpSync, mkdirSync, rmSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';

import { crashChecks } from './scenarios/crash.js';
import { elasticChecks } from './scenarios/elastic.js';
import { faultChecks } from './scenarios/faults.js';
import { fleetChecks } from './scenarios/fleet.js';
import { isolatedChecks } from './scenarios/isolated.js';
import { reclaimChecks } from './scenarios/reclaim.js';
import { REPO_ROOT } from './support/native.js';
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
  isolatedChecks(runner, world);
  reclaimChecks(runner, world);
  elasticChecks(runner, world);
  crashChecks(runner, world);
  faultChecks(runner, world);
  // GPUSHARDS_E2E_ONLY=<regex>: only the checks it matches, plus the first two (the fleet
  // and the teams every other check uses). For debugging; the numbers then cover fewer checks.
  const only = process.env.GPUSHARDS_E2E_ONLY;
  if (only) runner.keepOnly(new RegExp(only), 2);

  let closing = false;
  const emergency = (signal: NodeJS.Signals) => {
    if (closing) return;
    closing = true;
    console.log(`\n${signal}: stopping everything this run started`);
    saveLogs(system);
    void system.close().finally(() => {
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
  const keepAll = process.env.GPUSHARDS_E2E_KEEP === '1';
  if (failed > 0) await dumpDatabase(system);
  if (failed > 0 && !keepAll) saveLogs(system);
  closing = true;
  try {
    await system.close({ keepWorkDir: keepAll });
  } catch (error) {
    console.log(`cleanup: ${error instanceof Error ? error.message : String(error)}`);
    if (error instanceof AggregateError)
      for (const e of error.errors) console.log(`  ${String(e)}`);
  }
  if (keepAll) console.log(`kept ${system.workDir} (GPUSHARDS_E2E_KEEP=1)`);
  killAllGroups();
  console.log(`e2e: ${((Date.now() - started) / 1000).toFixed(1)}s`);
  console.log(`${passed} passed, ${failed} failed`);
  return failed === 0 ? 0 : 1;
}

/** For the logs of a failed run: shards, reservations and the audit trail, as JSON lines. */
async function dumpDatabase(system: System): Promise<void> {
  const tables: Record<string, string> = {
    shards: 'SELECT * FROM shard ORDER BY created_at',
    reservations: 'SELECT * FROM shard_gpu ORDER BY reserved_at',
    gpus: 'SELECT * FROM gpu ORDER BY host_id, index',
    audit: 'SELECT * FROM audit_event ORDER BY at, id',
  };
  for (const [name, sql] of Object.entries(tables)) {
    try {
      const rows = await system.query(sql);
      writeFileSync(
        join(system.workDir, 'logs', `db-${name}.jsonl`),
        rows.map((row) => JSON.stringify(row)).join('\n') + '\n',
      );
    } catch (error) {
      console.log(`could not dump ${name}: ${String(error)}`);
    }
  }
}

/**
 * After a failure, every process's log is copied to test/e2e/logs/<run> (git-ignored; earlier
 * runs' are removed) before the work folder goes.
 */
function saveLogs(system: System): void {
  const root = join(REPO_ROOT, 'test/e2e/logs');
  try {
    rmSync(root, { recursive: true, force: true });
    mkdirSync(root, { recursive: true });
    cpSync(join(system.workDir, 'logs'), join(root, system.runId), { recursive: true });
    console.log(`logs of the failed run: ${join(root, system.runId)}`);
  } catch (error) {
    console.log(`could not keep the logs: ${String(error)}`);
  }
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
