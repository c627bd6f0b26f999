// The control plane as `node dist/main.js` runs it (configured from the environment), with the
// agent link replaced by a sink that takes every command and delivers nothing: main.js refuses
// to start without agents, and with GPUSHARDS_NO_AGENTS createShard answers NO_AGENTS.
// GPUSHARDS_BENCH_LIMITS=off starts it without the request limits (query cost, depth, rate:
// docs/api.md "Limits"), to measure what they cost.
import { resolve } from 'node:path';

const dist = resolve(process.env.GPUSHARDS_BENCH_DIST ?? 'apps/control-plane/dist');
const { createControlPlane, loadConfigFromEnv } = await import(`${dist}/index.js`);

const sink = {
  launch: () => Promise.resolve(),
  stop: () => Promise.resolve(),
  delete: () => Promise.resolve(),
  resize: () => Promise.resolve(),
  reconcile: () => Promise.resolve(),
};
const config = loadConfigFromEnv();
const enforceLimits = process.env.GPUSHARDS_BENCH_LIMITS !== 'off';
const controlPlane = await createControlPlane({
  ...config,
  security: { ...config.security, enforceLimits },
  shardCommands: sink,
});
controlPlane.app.enableShutdownHooks(['SIGINT', 'SIGTERM']);
