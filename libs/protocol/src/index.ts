export { PROTOCOL_VERSION } from './version.js';
export {
  SAFE_ID_PATTERN,
  assertValidHostId,
  bytesSchema,
  commandIdSchema,
  containerIdSchema,
  errorCodeSchema,
  errorSchema,
  eventIdSchema,
  gpuUuidSchema,
  hostIdSchema,
  isValidHostId,
  positiveBytesSchema,
  shardIdSchema,
  teamIdSchema,
  timestampSchema,
} from './primitives.js';
export * from './subjects.js';
export * from './env.js';
export * from './nats-auth.js';
export * from './env-variables.js';
export * from './messages.js';
export * from './codec.js';
export * from './request.js';
export * from './text.js';
export * from './command-answer.js';
