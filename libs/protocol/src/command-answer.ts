import { checkSubjectHost, decodeMessage } from './codec.js';
import { commandSchema, type Command, type CommandReply } from './command-messages.js';
import { commandIdSchema } from './primitives.js';
import { errorMessage, protocolText } from './text.js';
import { PROTOCOL_VERSION } from './version.js';

/** A command the agent's link refused before (or instead of) the agent's handler. */
export interface CommandRefusal {
  readonly commandId: string | null;
  readonly code: 'UNSUPPORTED_VERSION' | 'INVALID_COMMAND' | 'WRONG_HOST' | 'INTERNAL';
  readonly message: string;
  /** What the handler threw (INTERNAL). */
  readonly cause?: unknown;
}

/**
 * The agent's answer to one encoded command, whatever carried it (NATS, the in-process hub):
 * an undecodable command is refused (INVALID_COMMAND, UNSUPPORTED_VERSION, with its command
 * id when one is readable), a command whose hostId is not `subject`'s host is refused
 * (WRONG_HOST), a handler that throws gets INTERNAL; otherwise the handler's reply. Never
 * rejects. `onRefused` sees each refusal (to log it).
 */
export async function answerCommand(
  hostId: string,
  subject: string,
  data: Uint8Array | string,
  handler: (command: Command) => Promise<CommandReply>,
  onRefused: (refusal: CommandRefusal) => void = () => undefined,
): Promise<CommandReply> {
  const refuse = (refusal: CommandRefusal): CommandReply => {
    onRefused(refusal);
    return {
      protocolVersion: PROTOCOL_VERSION,
      hostId,
      commandId: refusal.commandId,
      ok: false,
      error: { code: refusal.code, message: protocolText(refusal.message) },
    };
  };
  const decoded = decodeMessage(commandSchema, data);
  if (!decoded.ok) {
    const code =
      decoded.error.code === 'UNSUPPORTED_VERSION' ? 'UNSUPPORTED_VERSION' : 'INVALID_COMMAND';
    return refuse({ commandId: readCommandId(data), code, message: decoded.error.message });
  }
  const command = decoded.message;
  const bound = checkSubjectHost(subject, command);
  if (!bound.ok) {
    return refuse({
      commandId: command.commandId,
      code: 'WRONG_HOST',
      message: bound.error.message,
    });
  }
  try {
    return await handler(command);
  } catch (error) {
    return refuse({
      commandId: command.commandId,
      code: 'INTERNAL',
      message: errorMessage(error),
      cause: error,
    });
  }
}

/** The command id of an undecodable command, when it has a readable one, for its error reply. */
export function readCommandId(data: Uint8Array | string): string | null {
  try {
    const text = typeof data === 'string' ? data : new TextDecoder().decode(data);
    const id = (JSON.parse(text) as { commandId?: unknown } | null)?.commandId;
    return commandIdSchema.safeParse(id).success ? (id as string) : null;
  } catch {
    return null;
  }
}
