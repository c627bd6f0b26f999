import { createControlPlane } from './control-plane.js';
import { ConfigError, loadConfigFromEnv } from './config/control-plane-config.js';

/** `node dist/main.js`: the control plane as a service, configured from the environment. */
async function main(): Promise<void> {
  let config;
  try {
    config = loadConfigFromEnv();
  } catch (error) {
    if (!(error instanceof ConfigError)) throw error;
    process.stderr.write(`gpushards control plane: ${error.message}\n`);
    process.exit(2);
  }
  const controlPlane = await createControlPlane(config);
  controlPlane.app.enableShutdownHooks(['SIGINT', 'SIGTERM']);
}

main().catch((error: unknown) => {
  process.stderr.write(`gpushards control plane failed to start: ${String(error)}\n`);
  process.exit(1);
});
