import { describe, test } from 'node:test';
import assert from 'node:assert/strict';

import { decodeMessage, encodeMessage } from './codec.js';
import * as examples from './testing/fixtures.js';
import {
  heartbeatSchema,
  reconcileReplySchema,
  reconcileRequestSchema,
  registerReplySchema,
  registerRequestSchema,
  shardStateEventSchema,
  shardWakeSchema,
} from './agent-messages.js';
import { commandReplySchema, commandSchema } from './command-messages.js';
import type { z } from 'zod';

function roundTrip<S extends z.ZodType>(schema: S, message: z.input<S>): void {
  const text = encodeMessage(schema, message);
  const fromString = decodeMessage(schema, text);
  const fromBytes = decodeMessage(schema, new TextEncoder().encode(text));
  assert.deepEqual(fromString, { ok: true, message });
  assert.deepEqual(fromBytes, { ok: true, message });
}

describe('every message round-trips through encode and decode', () => {
  test('register request and both replies', () => {
    roundTrip(registerRequestSchema, examples.registerRequest);
    roundTrip(registerReplySchema, examples.registerAccepted);
    roundTrip(registerReplySchema, examples.registerRejected);
  });

  test('heartbeat', () => roundTrip(heartbeatSchema, examples.heartbeat));
  test('heartbeat with ungoverned GPU work', () =>
    roundTrip(heartbeatSchema, {
      ...examples.heartbeat,
      ungovernedCompute: [
        {
          shardId: 'shard_01HZX3',
          gpuUuid: examples.heartbeat.gpus[0]!.uuid,
          action: 'kill',
          pid: 4242,
          smPercent: 68,
          pids: [4242],
          busyPercent: 68,
          samples: 5,
          busySamples: 5,
          thresholdPercent: 10,
          windowSeconds: 5.01,
          killedPids: [4242],
          at: '2024-05-01T12:00:00.000Z',
        },
      ],
    }));

  test('heartbeat with pressure reliefs', () =>
    roundTrip(heartbeatSchema, {
      ...examples.heartbeat,
      pressureReliefs: [
        {
          shardId: 'shard_01HZX3',
          gpuUuid: examples.heartbeat.gpus[0]!.uuid,
          at: '2024-05-01T12:00:00.000Z',
          reliefSeconds: 0.042,
          killedPids: [4242],
        },
        {
          shardId: 'shard_01HZX3',
          gpuUuid: examples.heartbeat.gpus[0]!.uuid,
          at: '2024-05-01T12:00:01.000Z',
          killedPids: [],
        },
      ],
    }));

  test('shard state events', () => {
    roundTrip(shardStateEventSchema, examples.pullingEvent);
    roundTrip(shardStateEventSchema, examples.exitedEvent);
  });

  test('reconcile request and reply', () => {
    roundTrip(reconcileRequestSchema, examples.reconcileRequest);
    roundTrip(reconcileReplySchema, examples.reconcileReply);
  });

  test('each command type', () => {
    for (const command of examples.commands) roundTrip(commandSchema, command);
  });

  test('each command reply', () => {
    for (const reply of examples.commandReplies) roundTrip(commandReplySchema, reply);
  });

  test('a reconcile request that accepts kept shards, and a reply that keeps some', () => {
    roundTrip(reconcileRequestSchema, { ...examples.reconcileRequest, acceptsKeptShards: true });
    roundTrip(reconcileReplySchema, { ...examples.reconcileReply, keptShardIds: ['shard_01HZX3'] });
    roundTrip(registerRequestSchema, { ...examples.registerRequest, acceptsKeptShards: true });
    const accepted = examples.registerAccepted;
    assert.ok(accepted.accepted);
    roundTrip(registerReplySchema, { ...accepted, keptShardIds: ['shard_01HZX3'] });
    const notAnId = decodeMessage(
      reconcileReplySchema,
      JSON.stringify({ ...examples.reconcileReply, keptShardIds: ['not an id!'] }),
    );
    assert.equal(notAnId.ok, false, 'kept shards are shard ids');
  });

  test('elastic memory: a suspending host, memory in reports, moves, wake requests', () => {
    roundTrip(registerRequestSchema, {
      ...examples.registerRequest,
      host: { ...examples.registerRequest.host, suspendBudgetBytes: 64 * 2 ** 30 },
    });
    roundTrip(reconcileRequestSchema, {
      ...examples.reconcileRequest,
      containers: [{ ...examples.reconcileRequest.containers[0]!, memory: 'partial' }],
    });
    roundTrip(reconcileReplySchema, {
      ...examples.reconcileReply,
      suspendedShardIds: ['shard_s1'],
    });
    const { exitCode: _exitCode, reason: _reason, ...event } = examples.exitedEvent;
    roundTrip(shardStateEventSchema, {
      ...event,
      state: 'SUSPENDED',
      moved: { bytes: 21 * 2 ** 30, seconds: 11.6, processes: 2 },
    });
    roundTrip(shardWakeSchema, {
      protocolVersion: 1,
      hostId: examples.registerRequest.hostId,
      shardId: 'shard_01HZX3',
      at: '2024-05-01T12:00:00.000Z',
      requests: 3,
    });
    const odd = decodeMessage(
      reconcileRequestSchema,
      JSON.stringify({
        ...examples.reconcileRequest,
        containers: [{ ...examples.reconcileRequest.containers[0]!, memory: 'elsewhere' }],
      }),
    );
    assert.equal(odd.ok, false, 'memory is resident, suspended or partial');
  });

  test('elastic memory: moves carry the shard version they were decided at, a whole number', () => {
    const { commandId, hostId, protocolVersion } = examples.commands[0]!;
    const header = { protocolVersion, hostId, commandId };
    const suspend = { ...header, type: 'suspend' as const, shardId: 'shard_01HZX3' };
    roundTrip(commandSchema, { ...suspend, cause: 'idle-suspend', shardVersion: 7 });
    roundTrip(commandSchema, { ...suspend, cause: 'idle-suspend' });
    roundTrip(commandSchema, {
      ...header,
      type: 'resume',
      shardId: 'shard_01HZX3',
      shardVersion: 8,
    });
    for (const shardVersion of [-1, 1.5, '7']) {
      const decoded = decodeMessage(
        commandSchema,
        JSON.stringify({ ...suspend, cause: 'idle-suspend', shardVersion }),
      );
      assert.equal(decoded.ok, false, `shardVersion ${JSON.stringify(shardVersion)} refused`);
      assert.ok(!decoded.ok);
      assert.match(decoded.error.message, /shardVersion/);
    }
  });

  test('a launch spec without the optional command and overhead', () => {
    const { command: _command, contextOverheadBytes: _overhead, ...bare } = examples.launchSpec;
    roundTrip(commandSchema, { ...examples.commands[0]!, type: 'launch', shard: bare });
  });
});

describe('message rules', () => {
  const launch = examples.commands[0]!;

  function invalid<S extends z.ZodType>(schema: S, value: unknown): string {
    const result = decodeMessage(schema, JSON.stringify(value));
    assert.equal(result.ok, false, `expected ${JSON.stringify(value)} to be refused`);
    assert.ok(!result.ok);
    assert.equal(result.error.code, 'INVALID');
    return result.error.message;
  }

  test('register: host.hostId must equal hostId', () => {
    const message = invalid(registerRequestSchema, {
      ...examples.registerRequest,
      host: { ...examples.registerRequest.host, hostId: 'other-host' },
    });
    assert.match(message, /host\.hostId: host\.hostId must equal hostId/);
  });

  test('register: GPU UUIDs and indexes are unique', () => {
    const [gpu] = examples.registerRequest.gpus;
    const message = invalid(registerRequestSchema, {
      ...examples.registerRequest,
      gpus: [gpu, gpu],
    });
    assert.match(message, /duplicate GPU "GPU-5d3b/);
    assert.match(message, /duplicate GPU index 0/);
  });

  test('launch: at least one GPU, no GPU twice, limits above zero', () => {
    const withGpus = (gpus: unknown) => ({ ...launch, shard: { ...examples.launchSpec, gpus } });
    assert.match(
      invalid(commandSchema, withGpus([])),
      /shard\.gpus: a shard needs at least one GPU/,
    );
    const gpu = { uuid: examples.GPU_0, limitBytes: 1 };
    assert.match(invalid(commandSchema, withGpus([gpu, gpu])), /duplicate GPU/);
    assert.match(
      invalid(commandSchema, withGpus([{ ...gpu, limitBytes: 0 }])),
      /limitBytes: a memory limit must be at least 1 byte/,
    );
  });

  test('launch: command arguments and env values cannot hold NUL', () => {
    const shard = { ...examples.launchSpec, command: ['sh', 'a\0b'], env: { A: 'x\0' } };
    const message = invalid(commandSchema, { ...launch, shard });
    assert.match(message, /shard\.command\.1: command arguments cannot contain NUL/);
    assert.match(message, /shard\.env\.A: environment values cannot contain NUL/);
  });

  test('launch: shard ids are safe tokens (they become labels and folder names)', () => {
    const shard = { ...examples.launchSpec, shardId: '../etc' };
    assert.match(
      invalid(commandSchema, { ...launch, shard }),
      /shard\.shardId: a shard id must be/,
    );
  });

  test('commands need a UUID command id', () => {
    assert.match(
      invalid(commandSchema, { ...launch, commandId: 'cmd-1' }),
      /commandId: a command id must be a UUID/,
    );
  });

  test('stop: grace is 0-600 whole seconds', () => {
    const stop = examples.commands[1]!;
    assert.match(invalid(commandSchema, { ...stop, graceSeconds: -1 }), /graceSeconds/);
    assert.match(invalid(commandSchema, { ...stop, graceSeconds: 601 }), /graceSeconds/);
  });

  test('state events: unknown states and bad timestamps are refused', () => {
    assert.match(
      invalid(shardStateEventSchema, { ...examples.pullingEvent, state: 'PAUSED' }),
      /^shard state event: state: /,
    );
    assert.match(
      invalid(shardStateEventSchema, { ...examples.pullingEvent, at: '2024-05-01 12:00' }),
      /at: timestamps must be ISO 8601/,
    );
  });

  test('heartbeat: utilization is a percentage', () => {
    const gpus = [{ uuid: examples.GPU_0, usedBytes: 0, utilizationPercent: 101 }];
    assert.match(invalid(heartbeatSchema, { ...examples.heartbeat, gpus }), /utilizationPercent/);
  });

  test('reconcile reply: a shard is desired at most once', () => {
    const desired = [examples.launchSpec, examples.launchSpec];
    assert.match(
      invalid(reconcileReplySchema, { ...examples.reconcileReply, desired }),
      /desired: duplicate shard "shard_01HZX3"/,
    );
  });

  test('command replies: a failure may lack the command id, a success may not', () => {
    const [success] = examples.commandReplies;
    assert.match(invalid(commandReplySchema, { ...success, commandId: null }), /commandId/);
  });
});
