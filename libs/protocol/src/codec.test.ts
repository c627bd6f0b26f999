import { describe, test } from 'node:test';
import assert from 'node:assert/strict';
import fc from 'fast-check';

import { decodeMessage, encodeMessage, type DecodeErrorCode } from './codec.js';
import * as examples from './testing/fixtures.js';
import {
  AGENT_MESSAGE_SCHEMAS,
  heartbeatSchema,
  reconcileReplySchema,
  registerReplySchema,
  registerRequestSchema,
} from './agent-messages.js';
import { commandReplySchema, commandSchema } from './command-messages.js';
import type { z } from 'zod';

function refused<S extends z.ZodType>(
  schema: S,
  raw: string | Uint8Array,
  code: DecodeErrorCode,
): string {
  const result = decodeMessage(schema, raw);
  assert.ok(!result.ok, `expected ${code}, the message was accepted`);
  assert.equal(result.error.code, code, result.error.message);
  return result.error.message;
}

const json = (value: unknown) => JSON.stringify(value);

describe('decodeMessage refuses, naming the reason', () => {
  test('MALFORMED: not JSON', () => {
    assert.match(
      refused(heartbeatSchema, '{"protocolVersion":1,', 'MALFORMED'),
      /^heartbeat: payload is not JSON \(/,
    );
    refused(heartbeatSchema, '', 'MALFORMED');
  });

  test('MALFORMED: not UTF-8', () => {
    assert.equal(
      refused(heartbeatSchema, new Uint8Array([0x7b, 0xff, 0x7d]), 'MALFORMED'),
      'heartbeat: payload is not valid UTF-8',
    );
  });

  test('MALFORMED: JSON that is not an object', () => {
    const cases: [string, string][] = [
      ['null', 'null'],
      ['[1]', 'an array'],
      ['42', 'a number'],
      ['"hi"', 'a string'],
      ['true', 'a boolean'],
    ];
    for (const [raw, described] of cases) {
      assert.equal(
        refused(commandSchema, raw, 'MALFORMED'),
        `command: expected a JSON object, got ${described}`,
      );
    }
  });

  test('UNSUPPORTED_VERSION names both versions', () => {
    const message = refused(
      heartbeatSchema,
      json({ ...examples.heartbeat, protocolVersion: 2 }),
      'UNSUPPORTED_VERSION',
    );
    assert.equal(
      message,
      'heartbeat: the sender speaks protocolVersion 2, this side speaks protocolVersion 1',
    );
    // Checked before the body, so a future message shape still gets the version answer.
    refused(commandSchema, json({ protocolVersion: 0, type: 'teleport' }), 'UNSUPPORTED_VERSION');
  });

  test('INVALID: a missing or non-numeric protocolVersion', () => {
    const { protocolVersion: _omitted, ...unversioned } = examples.heartbeat;
    assert.match(refused(heartbeatSchema, json(unversioned), 'INVALID'), /protocolVersion: /);
    assert.match(
      refused(heartbeatSchema, json({ ...examples.heartbeat, protocolVersion: '1' }), 'INVALID'),
      /protocolVersion: /,
    );
  });

  test('INVALID: an unknown command type, listing the known ones', () => {
    const message = refused(
      commandSchema,
      json({ ...examples.commands[1], type: 'reboot' }),
      'INVALID',
    );
    assert.equal(
      message,
      'command: type: unknown command type "reboot": expected one of launch, stop, delete, resize, reconcile, suspend, resume',
    );
    assert.match(
      refused(commandSchema, json({ protocolVersion: 1, hostId: 'h' }), 'INVALID'),
      /unknown command type undefined/,
    );
  });

  test('INVALID: missing fields', () => {
    const { gpus: _gpus, ...withoutGpus } = examples.heartbeat;
    assert.match(refused(heartbeatSchema, json(withoutGpus), 'INVALID'), /^heartbeat: gpus: /);
  });

  test('INVALID: negative, fractional and >= 2^53 byte counts', () => {
    const withUsed = (usedBytes: unknown) =>
      json({ ...examples.heartbeat, gpus: [{ uuid: examples.GPU_0, usedBytes }] });
    assert.match(
      refused(heartbeatSchema, withUsed(-1), 'INVALID'),
      /gpus\.0\.usedBytes: byte counts cannot be negative/,
    );
    assert.match(
      refused(heartbeatSchema, withUsed(1.5), 'INVALID'),
      /byte counts must be whole numbers/,
    );
    // 2^53 + 1 is not even representable: JSON.parse rounds it to 2^53, still refused.
    assert.match(
      refused(heartbeatSchema, withUsed(2 ** 53), 'INVALID'),
      /byte counts must be below 2\^53/,
    );
    const raw = withUsed(0).replace('"usedBytes":0', '"usedBytes":9007199254740993');
    assert.match(refused(heartbeatSchema, raw, 'INVALID'), /below 2\^53/);
    assert.match(refused(heartbeatSchema, withUsed('12g'), 'INVALID'), /whole numbers/);
    assert.ok(decodeMessage(heartbeatSchema, withUsed(Number.MAX_SAFE_INTEGER)).ok);
  });

  test('INVALID: a bad host id', () => {
    for (const hostId of ['a.b', '*', '', 'x'.repeat(65)]) {
      assert.match(
        refused(heartbeatSchema, json({ ...examples.heartbeat, hostId }), 'INVALID'),
        /hostId: a host id must be 1-64 characters/,
      );
    }
  });

  test('INVALID: reports at most five issues, then a count', () => {
    const gpus = Array.from({ length: 8 }, () => ({ uuid: examples.GPU_0, usedBytes: -1 }));
    const message = refused(heartbeatSchema, json({ ...examples.heartbeat, gpus }), 'INVALID');
    assert.equal(message.split('; ').length, 6);
    assert.match(message, /; and 3 more$/);
  });

  test('INVALID: a reply of the wrong shape', () => {
    assert.match(
      refused(
        registerReplySchema,
        json({ ...examples.registerAccepted, accepted: 'yes' }),
        'INVALID',
      ),
      /^register reply: accepted: /,
    );
  });
});

describe('rolling upgrades', () => {
  test('unknown extra fields are tolerated and dropped', () => {
    const newer = {
      ...examples.heartbeat,
      cpuLoad: 0.5,
      gpus: [{ uuid: examples.GPU_0, usedBytes: 0, temperatureC: 60 }],
    };
    const result = decodeMessage(heartbeatSchema, json(newer));
    assert.deepEqual(result, {
      ok: true,
      message: { ...examples.heartbeat, gpus: [{ uuid: examples.GPU_0, usedBytes: 0 }] },
    });
  });

  test('unknown enum values are refused', () => {
    refused(
      commandReplySchema,
      json({ ...examples.commandReplies[0], result: { type: 'launch', state: 'HIBERNATING' } }),
      'INVALID',
    );
  });
});

describe('encodeMessage', () => {
  test('writes JSON that decodes to the same message', () => {
    const text = encodeMessage(reconcileReplySchema, examples.reconcileReply);
    assert.deepEqual(JSON.parse(text), examples.reconcileReply);
  });

  test('throws on a message of ours that is invalid, saying why', () => {
    assert.throws(
      () => encodeMessage(heartbeatSchema, { ...examples.heartbeat, sequence: -1 }),
      /^Error: refusing to send an invalid heartbeat: sequence: .* \(a bug in the sender\)$/,
    );
  });
});

describe('no decode path throws', () => {
  const schemas: z.ZodType[] = [
    ...Object.values(AGENT_MESSAGE_SCHEMAS),
    registerReplySchema,
    reconcileReplySchema,
    commandSchema,
    commandReplySchema,
  ];
  const decodesWithoutThrowing = (raw: string | Uint8Array) => {
    for (const schema of schemas) {
      const result = decodeMessage(schema, raw);
      assert.equal(typeof result.ok, 'boolean');
      if (!result.ok) assert.ok(result.error.message.length > 0);
    }
  };

  test('arbitrary strings', () => {
    fc.assert(fc.property(fc.string({ unit: 'binary' }), decodesWithoutThrowing));
  });

  test('arbitrary bytes', () => {
    fc.assert(fc.property(fc.uint8Array({ maxLength: 512 }), decodesWithoutThrowing));
  });

  test('arbitrary JSON values, bare and under the current protocolVersion', () => {
    fc.assert(
      fc.property(fc.jsonValue(), (value) => {
        decodesWithoutThrowing(JSON.stringify(value));
        if (typeof value === 'object' && value !== null && !Array.isArray(value)) {
          decodesWithoutThrowing(JSON.stringify({ ...value, protocolVersion: 1 }));
        }
      }),
    );
  });

  test('valid messages with one field replaced by an arbitrary JSON value', () => {
    const samples: [z.ZodType, Record<string, unknown>][] = [
      [registerRequestSchema, examples.registerRequest],
      [heartbeatSchema, examples.heartbeat],
      ...examples.commands.map((command): [z.ZodType, Record<string, unknown>] => [
        commandSchema,
        command,
      ]),
    ];
    fc.assert(
      fc.property(
        fc.constantFrom(...samples),
        fc.nat(),
        fc.jsonValue(),
        ([schema, sample], fieldIndex, replacement) => {
          const keys = Object.keys(sample);
          const key = keys[fieldIndex % keys.length]!;
          const result = decodeMessage(schema, JSON.stringify({ ...sample, [key]: replacement }));
          assert.equal(typeof result.ok, 'boolean');
        },
      ),
    );
  });

  test('deeply nested JSON', () => {
    decodesWithoutThrowing('['.repeat(100_000) + ']'.repeat(100_000));
    // JSON.stringify cannot build these (it recurses), so splice them into valid messages.
    const splice = (message: object, field: string, raw: string) =>
      json({ ...message, [field]: 'SPLICE' }).replace('"SPLICE"', raw);
    const deepArray = '['.repeat(100_000) + ']'.repeat(100_000);
    const deepObject = '{"A":'.repeat(100_000) + '""' + '}'.repeat(100_000);
    decodesWithoutThrowing(splice(examples.heartbeat, 'gpus', deepArray));
    decodesWithoutThrowing(splice(examples.launchSpec, 'env', deepObject));
    decodesWithoutThrowing(splice(examples.commands[0]!, 'shard', deepObject));
  });
});
