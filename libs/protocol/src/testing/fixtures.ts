// Valid example messages, for tests only (not exported from index.ts).
import type {
  Heartbeat,
  ReconcileReply,
  ReconcileRequest,
  RegisterReply,
  RegisterRequest,
  ShardStateEvent,
} from '../agent-messages.js';
import type { Command, CommandReply } from '../command-messages.js';
import type { ShardLaunchSpec } from '../shard-spec.js';

export const HOST_ID = 'gpu-box-07';
export const GPU_0 = 'GPU-5d3b7a1e-0c4f-4c8e-9f0a-1b2c3d4e5f60';
export const GPU_1 = 'GPU-8a9b0c1d-2e3f-4a5b-8c7d-9e0f1a2b3c4d';
export const COMMAND_ID = '1b4e28ba-2fa1-41d2-883f-0016d3cca427';
const GIB = 1024 ** 3;

export const launchSpec: ShardLaunchSpec = {
  shardId: 'shard_01HZX3',
  teamId: 'team-vision',
  name: 'llama finetune',
  image: 'registry.example.com/vision/train:2024.05@sha256:' + 'a'.repeat(64),
  command: ['python', '-m', 'train', '--epochs=3'],
  env: { HF_HOME: '/cache/hf', BATCH_SIZE: '16', EMPTY: '' },
  gpus: [
    { uuid: GPU_0, limitBytes: 12 * GIB },
    { uuid: GPU_1, limitBytes: 12 * GIB },
  ],
  contextOverheadBytes: 300 * 1024 * 1024,
};

export const registerRequest: RegisterRequest = {
  protocolVersion: 1,
  hostId: HOST_ID,
  host: {
    hostId: HOST_ID,
    name: 'gpu-box-07.dc1.example.com',
    labels: { zone: 'dc1', 'example.com/tier': 'a100' },
    agentVersion: '0.1.0',
    driverVersion: '550.54.15',
    cudaVersion: '12.4',
    simulated: false,
    contextOverheadBytes: 300 * 1024 * 1024,
  },
  gpus: [
    { uuid: GPU_0, index: 0, model: 'NVIDIA A100-SXM4-80GB', totalBytes: 80 * GIB, usedBytes: 0 },
    { uuid: GPU_1, index: 1, model: 'NVIDIA A100-SXM4-80GB', totalBytes: 80 * GIB, usedBytes: GIB },
  ],
  runningShards: [{ shardId: 'shard_01HZX3', containerId: 'c'.repeat(64), state: 'RUNNING' }],
};

export const registerAccepted: RegisterReply = {
  protocolVersion: 1,
  hostId: HOST_ID,
  accepted: true,
  desired: [launchSpec],
  stoppedShardIds: ['shard_old'],
};

export const registerRejected: RegisterReply = {
  protocolVersion: 1,
  hostId: HOST_ID,
  accepted: false,
  error: { code: 'HOST_ID_IN_USE', message: 'another agent is registered as gpu-box-07' },
};

export const heartbeat: Heartbeat = {
  protocolVersion: 1,
  hostId: HOST_ID,
  sentAt: '2024-05-01T12:00:00.000Z',
  sequence: 42,
  gpus: [
    { uuid: GPU_0, usedBytes: 5 * GIB, utilizationPercent: 87.5 },
    { uuid: GPU_1, usedBytes: 0 },
  ],
  shards: [{ shardId: 'shard_01HZX3', usedBytesPerGpu: [{ gpuUuid: GPU_0, usedBytes: 5 * GIB }] }],
};

export const pullingEvent: ShardStateEvent = {
  protocolVersion: 1,
  hostId: HOST_ID,
  eventId: '9f1c2d3e-4b5a-4c6d-8e7f-0a1b2c3d4e5f',
  shardId: 'shard_01HZX3',
  state: 'PULLING',
  at: '2024-05-01T12:00:01.000+02:00',
  progress: { completedBytes: 1024, totalBytes: 4096 },
};

export const exitedEvent: ShardStateEvent = {
  protocolVersion: 1,
  hostId: HOST_ID,
  eventId: '0e1d2c3b-4a59-4867-a5b4-c3d2e1f0a9b8',
  shardId: 'shard_01HZX3',
  state: 'EXITED',
  containerId: 'c'.repeat(64),
  exitCode: 137,
  reason: 'killed (out of memory)',
  at: '2024-05-01T12:30:00Z',
};

export const reconcileRequest: ReconcileRequest = {
  protocolVersion: 1,
  hostId: HOST_ID,
  containers: [
    { shardId: 'shard_01HZX3', containerId: 'c'.repeat(64), running: true },
    { shardId: 'shard_old', containerId: 'd'.repeat(64), running: false },
  ],
};

export const reconcileReply: ReconcileReply = {
  protocolVersion: 1,
  hostId: HOST_ID,
  desired: [launchSpec],
  stoppedShardIds: [],
};

const header = { protocolVersion: 1, hostId: HOST_ID, commandId: COMMAND_ID } as const;

export const commands: Command[] = [
  { ...header, type: 'launch', shard: launchSpec },
  { ...header, type: 'stop', shardId: 'shard_01HZX3', graceSeconds: 30 },
  { ...header, type: 'delete', shardId: 'shard_01HZX3' },
  { ...header, type: 'resize', shardId: 'shard_01HZX3', gpus: [{ uuid: GPU_0, limitBytes: GIB }] },
  { ...header, type: 'reconcile' },
  { ...header, type: 'suspend', shardId: 'shard_01HZX3', cause: 'idle-suspend' },
  { ...header, type: 'resume', shardId: 'shard_01HZX3' },
];

export const commandReplies: CommandReply[] = [
  { ...header, ok: true, result: { type: 'launch', state: 'PULLING' } },
  { ...header, ok: true, result: { type: 'stop', wasRunning: true } },
  { ...header, ok: true, result: { type: 'delete', removed: false } },
  { ...header, ok: true, result: { type: 'resize', gpus: [{ uuid: GPU_0, limitBytes: GIB }] } },
  { ...header, ok: true, result: { type: 'reconcile' } },
  { ...header, ok: true, result: { type: 'suspend', memory: 'resident' } },
  { ...header, ok: true, result: { type: 'resume', memory: 'partial' } },
  { ...header, ok: false, error: { code: 'UNKNOWN_SHARD', message: 'no shard shard_x here' } },
  {
    ...header,
    commandId: null,
    ok: false,
    error: { code: 'INVALID_COMMAND', message: 'command: payload is not JSON' },
  },
];
