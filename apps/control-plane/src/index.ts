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
