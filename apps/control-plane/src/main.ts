import { agentLinkFromEnv } from './agent-link/agent-link-options.js';
import { createControlPlane } from './control-plane.js';
import { ConfigError, loadConfigFromEnv } from './config/control-plane-config.js';

/** `node dist/main.js`: the control plane as a service, configured from the environment. */
async function main(): Promise<void> {
  let config;
  let link;
  try {
    config = loadConfigFromEnv();
    link = agentLinkFromEnv();
  } catch (error) {
    if (!(error instanceof ConfigError)) throw error;
    process.stderr.write(`gpushards control plane: ${error.message}\n`);
    process.exit(2);
  }
  // Without GPUSHARDS_NATS_URL no agent can reach this control plane (one-box runs the
  // in-process link through createControlPlane instead): that must be meant.
  if (link === undefined && !config.security.noAgents) {
    process.stderr.write(
      'gpushards control plane: no agent link: set GPUSHARDS_NATS_URL (docs/operations.md), or GPUSHARDS_NO_AGENTS=true to run without agents on purpose (createShard then answers NO_AGENTS)\n',
    );
    process.exit(2);
  }
  const controlPlane = await createControlPlane({ ...config, ...(link ? { link } : {}) });
  controlPlane.app.enableShutdownHooks(['SIGINT', 'SIGTERM']);
}

main().catch((error: unknown) => {
  process.stderr.write(`gpushards control plane failed to start: ${String(error)}\n`);
  process.exit(1);
});
