// `node dist/testing/control-plane-process.js`: the control plane as `dist/main.js` runs it
// (configured from the environment), with the agent link replaced by FakeShardCommands, for
// tests that run control planes as processes without agents. main.js refuses to start without
// an agent link, and with GPUSHARDS_NO_AGENTS createShard answers NO_AGENTS.
// The request limits (docs/api.md "Limits") are off: such tests drive placement, not the API's
// admission of requests, and send far more at once than one token may.
import { createControlPlane } from '../control-plane.js';
import { loadConfigFromEnv } from '../config/control-plane-config.js';
import { FakeShardCommands } from './fake-shard-commands.js';

const config = loadConfigFromEnv();
const controlPlane = await createControlPlane({
  ...config,
  security: { ...config.security, enforceLimits: false },
  shardCommands: new FakeShardCommands(),
});
controlPlane.app.enableShutdownHooks(['SIGINT', 'SIGTERM']);
