#!/usr/bin/env node
import { agentOptionsFromEnv } from './config/env.js';
import { createAgent, type Agent } from './create-agent.js';

/** Starts the agent from GPUSHARDS_* variables (docs/agent.md) and runs until SIGINT/SIGTERM. */
async function main(): Promise<void> {
  let agent: Agent;
  try {
    agent = await createAgent(agentOptionsFromEnv());
  } catch (error) {
    // The agent's errors say what is wrong and what to do; a stack only helps with a bug.
    const debug = /^(debug|trace)$/.test(process.env.GPUSHARDS_LOG_LEVEL ?? '');
    const text =
      error instanceof Error && !debug ? error.message : String((error as Error)?.stack ?? error);
    process.stderr.write(`gpushards agent: ${text}\n`);
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
