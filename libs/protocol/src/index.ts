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
export {
  CAP_POLICY_VALUES,
  COMPUTE_MODE_VALUES,
  CONTAINER_STATUSES,
  MAX_COMMAND_ARGS,
  MAX_COMMAND_BYTES,
  MAX_GPUS_PER_HOST,
  MAX_SHARDS_PER_HOST,
  MEMORY_RESIDENCIES,
  SHARD_STATES,
  capPolicySchema,
  computeShareSchema,
  gpuLimitSchema,
  imageReferenceSchema,
  memoryResidencySchema,
  shardLaunchSpecSchema,
  shardStateSchema,
  type CapPolicyValue,
  type ComputeShareSpec,
  type ContainerStatus,
  type GpuLimit,
  type MemoryResidency,
  type ShardLaunchSpec,
  type ShardState,
} from './shard-spec.js';
export * from './agent-messages.js';
export * from './command-messages.js';
export * from './codec.js';
export * from './request.js';
export * from './agent-link-base.js';
export * from './text.js';
export * from './command-answer.js';
