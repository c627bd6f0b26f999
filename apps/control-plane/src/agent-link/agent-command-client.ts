import { randomUUID } from 'node:crypto';
import {
  PROTOCOL_VERSION,
  commandReplySchema,
  commandSchema,
  decodeMessage,
  encodeMessage,
  type Command,
  type CommandResult,
  type ComputeShareSpec,
  type GpuLimit,
  type ShardLaunchSpec,
} from '@gpushards/protocol';
import type { Logger } from '../logging/logger.js';
import type { ShardCommands, SuspendCause } from '../shards/shard-commands.js';
import { AgentClientProxy } from './agent-client-proxy.js';
import { CommandNotDeliveredError, type AgentTransport } from './agent-transport.js';

/** How commands are delivered: each attempt's wait, how many attempts, the pause between. */
export interface CommandDeliveryOptions {
  /** How long one attempt waits for the agent's reply; default 10 s. */
  readonly timeoutMs?: number;
  /** Attempts in all, the first included; default 3. */
  readonly attempts?: number;
  /** Pause before the second attempt, doubled before each next one; default 1 s. */
  readonly retryDelayMs?: number;
}

export const DEFAULT_COMMAND_DELIVERY = {
  timeoutMs: 10_000,
  attempts: 3,
  retryDelayMs: 1_000,
} as const satisfies Required<CommandDeliveryOptions>;

type WithoutHeader<T> = T extends unknown
  ? Omit<T, 'protocolVersion' | 'hostId' | 'commandId'>
  : never;
/** A command without its header (protocolVersion, hostId, commandId), which send() adds. */
export type CommandBody = WithoutHeader<Command>;

/** The agent answered the command with an error (its code is one of COMMAND_ERROR_CODES). */
export class CommandRefusedError extends Error {
  override name = 'CommandRefusedError';

  constructor(
    readonly code: string,
    message: string,
  ) {
    super(message);
  }
}

/**
 * The ShardCommands port over the agents' microservices (AgentClientProxy on an
 * AgentTransport): each command gets a fresh command id, and
 * an attempt that no agent answered in time is repeated with the same id, so the agent acts
 * on it once however many copies arrive (it remembers the replies by id). Resolves when the
 * agent took the command on; rejects when it refused, or after the last unanswered attempt:
 * the caller logs that and the agent's next reconcile converges on the database.
 */
export class AgentCommandClient implements ShardCommands {
  private readonly delivery: Required<CommandDeliveryOptions>;
  private readonly closing = new AbortController();
  private readonly client: AgentClientProxy;

  constructor(
    transport: AgentTransport,
    options: CommandDeliveryOptions,
    private readonly logger: Logger,
  ) {
    this.client = new AgentClientProxy(transport);
    this.delivery = { ...DEFAULT_COMMAND_DELIVERY, ...options };
    const { timeoutMs, attempts, retryDelayMs } = this.delivery;
    if (!(timeoutMs > 0) || !Number.isInteger(attempts) || attempts < 1 || !(retryDelayMs >= 0)) {
      throw new RangeError(
        `command delivery needs timeoutMs > 0, attempts a whole number ≥ 1 and retryDelayMs ≥ 0, got ${JSON.stringify(options)}`,
      );
    }
  }

  async launch(hostId: string, spec: ShardLaunchSpec): Promise<void> {
    await this.send(hostId, { type: 'launch', shard: spec });
  }

  async stop(hostId: string, shardId: string, graceSeconds: number): Promise<void> {
    await this.send(hostId, { type: 'stop', shardId, graceSeconds });
  }

  async delete(hostId: string, shardId: string): Promise<void> {
    await this.send(hostId, { type: 'delete', shardId });
  }

  async resize(
    hostId: string,
    shardId: string,
    gpus: readonly GpuLimit[],
    compute?: ComputeShareSpec,
  ): Promise<void> {
    await this.send(hostId, {
      type: 'resize',
      shardId,
      gpus: [...gpus],
      ...(compute === undefined ? {} : { compute }),
    });
  }

  async suspend(
    hostId: string,
    shardId: string,
    cause: SuspendCause,
    shardVersion: number,
  ): Promise<void> {
    await this.send(hostId, { type: 'suspend', shardId, cause, shardVersion });
  }

  async resume(hostId: string, shardId: string, shardVersion: number): Promise<void> {
    await this.send(hostId, { type: 'resume', shardId, shardVersion });
  }

  async reconcile(hostId: string): Promise<void> {
    await this.send(hostId, { type: 'reconcile' });
  }

  /** Abandons the retries still waiting (the control plane is closing). */
  close(): void {
    this.closing.abort();
  }

  /** Sends one command until answered; resolves to the agent's result. */
  async send(hostId: string, body: CommandBody): Promise<CommandResult> {
    const commandId = randomUUID();
    const data = encodeMessage(commandSchema, {
      protocolVersion: PROTOCOL_VERSION,
      hostId,
      commandId,
      ...body,
    });
    const fields = { hostId, commandId, type: body.type, shardId: shardIdOf(body) };
    const { timeoutMs, attempts, retryDelayMs } = this.delivery;
    for (let attempt = 1; ; attempt++) {
      let raw: Uint8Array | string;
      try {
        raw = await this.client.command({ hostId, data, timeoutMs });
      } catch (error) {
        if (!(error instanceof CommandNotDeliveredError)) throw error;
        if (attempt >= attempts || this.closing.signal.aborted) {
          throw new CommandNotDeliveredError(
            `${body.type} command ${commandId} for host ${hostId} was not answered after ${attempt} attempt(s): ${error.message}`,
            { cause: error },
          );
        }
        const delayMs = retryDelayMs * 2 ** (attempt - 1);
        this.logger.warn(
          { ...fields, attempt, retryInMs: delayMs, reason: error.message },
          'agent did not answer a command; sending it again with the same id',
        );
        await this.pause(delayMs);
        continue;
      }
      const result = this.readReply(raw, hostId, commandId);
      this.logger.debug({ ...fields, attempt, result }, 'agent took a command on');
      return result;
    }
  }

  private readReply(raw: Uint8Array | string, hostId: string, commandId: string): CommandResult {
    const decoded = decodeMessage(commandReplySchema, raw);
    if (!decoded.ok) {
      throw new Error(
        `host ${hostId}'s reply to command ${commandId} is unusable: ${decoded.error.message}`,
      );
    }
    const reply = decoded.message;
    if (reply.hostId !== hostId || (reply.commandId !== null && reply.commandId !== commandId)) {
      throw new Error(
        `host ${hostId}'s reply to command ${commandId} names host ${reply.hostId} and command ${reply.commandId}`,
      );
    }
    if (!reply.ok) {
      throw new CommandRefusedError(
        reply.error.code,
        `host ${hostId} refused command ${commandId} (${reply.error.code}): ${reply.error.message}`,
      );
    }
    return reply.result;
  }

  private pause(ms: number): Promise<void> {
    return new Promise((resolve) => {
      const signal = this.closing.signal;
      const done = (): void => {
        clearTimeout(timer);
        signal.removeEventListener('abort', done);
        resolve();
      };
      const timer = setTimeout(done, ms);
      signal.addEventListener('abort', done, { once: true });
    });
  }
}

function shardIdOf(body: CommandBody): string | undefined {
  if (body.type === 'reconcile') return undefined;
  return body.type === 'launch' ? body.shard.shardId : body.shardId;
}
