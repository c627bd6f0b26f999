// Preloaded into the control plane that bench/queue/startup.mjs restarts (node --import): a V8
// CPU profile from the first module loaded; SIGUSR2 (sent once it is ready) writes it to
// $PROFILE_START_DIR/start-<pid>.cpuprofile and ends the process.
import { writeFileSync } from 'node:fs';
import { Session } from 'node:inspector';

const session = new Session();
session.connect();
const post = (method, params) =>
  new Promise((resolve, reject) =>
    session.post(method, params, (error, result) => (error ? reject(error) : resolve(result))),
  );
await post('Profiler.enable');
await post('Profiler.start');
process.on('SIGUSR2', async () => {
  const { profile } = await post('Profiler.stop');
  writeFileSync(
    `${process.env.PROFILE_START_DIR}/start-${process.pid}.cpuprofile`,
    JSON.stringify(profile),
  );
  process.exit(0);
});
