// The agent's variables that `npm start` passes on to its in-process agent
// (GPUSHARDS_SUSPEND_BUDGET, GPUSHARDS_COMPUTE_TURNS; docs/operations.md) are read as a fleet's
// agent reads them: a bad one stops the start with the agent's own message, before anything is
// made (no data folder, no admin token). Their good values are used by the portal tier's elastic
// test (a 3g budget, which the banner prints and the API's NOT_SUSPENDABLE reports).
//   node --test scripts/one-box/agent-variables.test.mjs
import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import { existsSync, mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, test } from 'node:test';

import { freePort } from './launcher.mjs';
import { REPO_ROOT } from './paths.mjs';

const parent = mkdtempSync(join(tmpdir(), 'gpushards-one-box-vars-'));
after(() => rmSync(parent, { recursive: true, force: true }));

for (const [name, value, message] of [
  [
    'GPUSHARDS_SUSPEND_BUDGET',
    '150%',
    /^ {2}GPUSHARDS_SUSPEND_BUDGET: a percent of the host's RAM is at most 100%, got 150%$/m,
  ],
  ['GPUSHARDS_COMPUTE_TURNS', 'sometimes', /^ {2}GPUSHARDS_COMPUTE_TURNS must be cpu or gpu/m],
]) {
  test(`${name}=${value} stops npm start with the agent's message, before it makes anything`, async () => {
    const dataDir = join(parent, name);
    const started = spawnSync(process.execPath, [join(REPO_ROOT, 'scripts/start.mjs')], {
      cwd: REPO_ROOT,
      encoding: 'utf8',
      timeout: 8 * 60_000,
      env: {
        ...process.env,
        GPUSHARDS_DATA_DIR: dataDir,
        GPUSHARDS_PORT: String(await freePort()),
        [name]: value,
      },
    });
    assert.equal(started.status, 1, started.stdout + started.stderr);
    assert.match(started.stderr, /^gpushards: invalid agent configuration:\n/);
    assert.match(started.stderr, message);
    assert.doesNotMatch(started.stderr, /\n\s+at /, 'no stack trace');
    assert.equal(existsSync(dataDir), false, 'no data folder');
  });
}
