import { describe, test } from 'node:test';
import assert from 'node:assert/strict';

import { encodeMessage } from './codec.js';
import { answerCommand, type CommandRefusal } from './command-answer.js';
import * as examples from './testing/fixtures.js';
import { commandSchema, type Command, type CommandReply } from './command-messages.js';
import { hostSubjects } from './subjects.js';
import { protocolText } from './text.js';

const subject = hostSubjects(examples.HOST_ID).cmd;
const launch = examples.commands.find((command) => command.type === 'launch')!;

function answer(data: Uint8Array | string, handler?: (command: Command) => Promise<CommandReply>) {
  const seen: Command[] = [];
  const refusals: CommandRefusal[] = [];
  const reply = answerCommand(
    examples.HOST_ID,
    subject,
    data,
    handler ??
      (async (command) => {
        seen.push(command);
        return examples.commandReplies[0]!;
      }),
    (refusal) => refusals.push(refusal),
  );
  return { seen, refusals, reply };
}

describe('answerCommand', () => {
  test('a well-formed command for this host goes to the handler; its reply is the answer', async () => {
    const { seen, refusals, reply } = answer(encodeMessage(commandSchema, launch));
    assert.deepEqual(await reply, examples.commandReplies[0]);
    assert.deepEqual(seen, [launch]);
    assert.deepEqual(refusals, []);
  });

  test('undecodable: INVALID_COMMAND with the command id when one is readable', async () => {
    const { seen, reply } = answer(JSON.stringify({ ...launch, type: 'explode' }));
    const answered = await reply;
    assert.equal(answered.ok, false);
    assert.equal(answered.commandId, launch.commandId);
    assert.equal(!answered.ok && answered.error.code, 'INVALID_COMMAND');
    assert.equal(seen.length, 0);
    const garbage = await answer(new Uint8Array([0xff, 0x00])).reply;
    assert.equal(garbage.commandId, null);
    assert.equal(!garbage.ok && garbage.error.code, 'INVALID_COMMAND');
  });

  test('a newer protocol version: UNSUPPORTED_VERSION', async () => {
    const answered = await answer(JSON.stringify({ ...launch, protocolVersion: 99 })).reply;
    assert.equal(!answered.ok && answered.error.code, 'UNSUPPORTED_VERSION');
  });

  test("another host's command: WRONG_HOST, never handled", async () => {
    const { seen, reply, refusals } = answer(
      encodeMessage(commandSchema, { ...launch, hostId: 'someone-else' }),
    );
    const answered = await reply;
    assert.equal(answered.hostId, examples.HOST_ID);
    assert.equal(!answered.ok && answered.error.code, 'WRONG_HOST');
    assert.equal(seen.length, 0);
    assert.equal(refusals[0]!.code, 'WRONG_HOST');
  });

  test('a handler that throws: INTERNAL with its message made protocol text', async () => {
    const boom = new Error('disk\nfull');
    const { reply, refusals } = answer(encodeMessage(commandSchema, launch), async () => {
      throw boom;
    });
    const answered = await reply;
    assert.equal(!answered.ok && answered.error.code, 'INTERNAL');
    assert.equal(!answered.ok && answered.error.message, 'disk full');
    assert.equal(refusals[0]!.cause, boom);
  });

  test('protocolText bounds and flattens text', () => {
    assert.equal(protocolText('  \u0000 '), 'no details');
    assert.equal(protocolText('x'.repeat(10), 5), 'xxxx…');
  });
});
