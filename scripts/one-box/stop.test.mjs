// `npm start` stopped as a service manager or a script stops it: SIGTERM to the process it
// started, which is npm. npm hands the signal to its script's process; that must be the one box
// itself (package.json's start script execs it), or a shell in between dies and leaves the server
// holding the port and the embedded database. After npm exits, nothing of it may be left.
//   node --test scripts/one-box/stop.test.mjs
import assert from 'node:assert/strict';
import { existsSync, mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, test } from 'node:test';

import { freePort, portInUse, startLauncher } from './launcher.mjs';

const dataDir = mkdtempSync(join(tmpdir(), 'gpushards-one-box-stop-'));
const lockFile = join(dataDir, 'database', 'gpushards.pid');
let launcher;
let server; // the pid holding the embedded database

function alive(pid) {
  try {
    process.kill(pid, 0);
    return true;
  } catch (error) {
    if (error.code === 'ESRCH') return false;
    throw error;
  }
}

after(async () => {
  // Only what this test started: npm, and the server it left, if it left one.
  if (launcher && launcher.child.exitCode === null && launcher.child.signalCode === null) {
    launcher.child.kill('SIGKILL');
    await launcher.exited;
  }
  if (server !== undefined && alive(server)) process.kill(server, 'SIGKILL');
  rmSync(dataDir, { recursive: true, force: true });
});

test('SIGTERM to the npm of `npm start` stops the server: the port is free, the data folder unlocked', async () => {
  const port = await freePort();
  launcher = startLauncher({ dataDir, port, npm: true });
  await launcher.ready;
  server = Number.parseInt(readFileSync(lockFile, 'utf8'), 10);
  assert.ok(alive(server), `the lock file names ${server}, which does not run`);
  assert.notEqual(server, launcher.child.pid, 'the server is npm itself');
  assert.equal(await portInUse(port), true);

  launcher.child.kill('SIGTERM');
  await launcher.exited;

  assert.equal(alive(server), false, `the server (pid ${server}) outlived npm`);
  assert.equal(await portInUse(port), false, `port ${port} is still taken`);
  assert.equal(existsSync(lockFile), false, `${lockFile} is still there`);
  assert.match(launcher.output, /gpushards: stopped/);
});
