export { createAgent, type Agent } from './create-agent.js';
export type { AgentOptions, GpuSourceOptions } from './config/agent-options.js';
export { agentOptionsFromEnv, ConfigError } from './config/env.js';
export { LinkUnavailableError, type AgentLink, type CommandHandler } from './link/agent-link.js';
export type { NatsAuth, NatsLinkOptions } from './link/nats-agent-link.js';
export { parseSimulatedGpus, type SimulatedGpu } from './gpus/simulated-gpus.js';
export type { GpuInventory } from './gpus/gpus.service.js';
export { RegistrationRejectedError } from './reconcile/agent.service.js';
