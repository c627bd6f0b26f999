// Preloaded into a measured process (node --import bench/profile-window.mjs): each SIGUSR2
// starts a V8 CPU profile or, if one is running, writes it to $PROFILE_WINDOW_DIR as
// <pid>-<n>.cpuprofile. A bench can so profile one case of a run instead of the whole run
// (--cpu-prof covers start-up and every phase, which hides what a case costs).
import { mkdirSync, writeFileSync } from 'node:fs';
import { Session } from 'node:inspector';
import { join } from 'node:path';

const dir = process.env.PROFILE_WINDOW_DIR;
if (!dir)
  throw new Error('profile-window.mjs: set PROFILE_WINDOW_DIR to the folder for the profiles');
// Made here, not at the first write: a missing folder would throw inside the signal handler and
// take the measured process down with the run's data.
mkdirSync(dir, { recursive: true });

const session = new Session();
session.connect();
const post = (method, params) =>
  new Promise((resolve, reject) =>
    session.post(method, params, (error, result) => (error ? reject(error) : resolve(result))),
  );

let running = false;
let written = 0;
process.on('SIGUSR2', async () => {
  if (!running) {
    running = true;
    await post('Profiler.enable');
    await post('Profiler.start');
    return;
  }
  running = false;
  const { profile } = await post('Profiler.stop');
  written += 1;
  writeFileSync(join(dir, `${process.pid}-${written}.cpuprofile`), JSON.stringify(profile));
});
