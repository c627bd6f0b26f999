#!/usr/bin/env node
import { ConfigError, agentOptionsFromEnv } from './config/env.js';
import { createAgent, type Agent } from './create-agent.js';

/** Starts the agent from GPUSHARDS_* variables (docs/agent.md) and runs until SIGINT/SIGTERM. */
async function main(): Promise<void> {
  let agent: Agent;
  try {
    agent = await createAgent(agentOptionsFromEnv());
  } catch (error) {
    const message =
      error instanceof ConfigError ? error.message : String((error as Error)?.stack ?? error);
    process.stderr.write(`gpushards agent: ${message}\n`);
    process.exit(1);
  }
  const shutdown = (): void => {
    void agent.stop().then(
      () => process.exit(0),
      (error: unknown) => {
        process.stderr.write(`gpushards agent: stopping failed: ${String(error)}\n`);
        process.exit(1);
      },
    );
  };
  process.once('SIGINT', shutdown);
  process.once('SIGTERM', shutdown);
}

void main();
