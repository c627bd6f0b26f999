export {
  createControlPlane,
  type ControlPlane,
  type ControlPlaneOptions,
} from './control-plane.js';
export {
  ConfigError,
  loadConfigFromEnv,
  type ControlPlaneConfig,
} from './config/control-plane-config.js';
export { ADMIN_TOKEN_FILE } from './auth/admin-token.bootstrap.js';
export {
  InProcessAgentHub,
  InProcessAgentLink,
  type InProcessAgentHubOptions,
} from './agent-link/in-process-agent-hub.js';
export { agentLinkFromEnv, type AgentLinkOptions } from './agent-link/agent-link-options.js';
export type { CommandDeliveryOptions } from './agent-link/agent-command-client.js';
export type { NatsAuth, NatsConnectionOptions } from './agent-link/nats-agent-transport.js';
