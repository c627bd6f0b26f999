import { Inject, Injectable } from '@nestjs/common';
import {
  PROTOCOL_VERSION,
  type Command,
  type CommandReply,
  type CommandResult,
} from '@gpushards/protocol';

import { AGENT_CONFIG, type AgentConfig } from '../config/agent-options.js';
import { errorMessage, protocolText } from '@gpushards/protocol';
import { RuntimeError } from '../containers/docker-runtime.js';
import { LOGGER, type Logger } from '../logging/logger.js';
import { BelowUsageError } from '../regions/regions.service.js';
import { CommandJournal } from './command-journal.js';
import { MemoryCommands } from './memory-commands.js';
import { ReconcileRequests } from './reconcile-requests.js';
import {
  NotSuspendableError,
  StaleCommandError,
  UnknownGpuError,
  UnknownShardError,
} from './shard-record.js';
import { ShardsService } from './shards.service.js';

/**
 * Answers the control plane's commands. Each command id is acted on once: a retry gets
 * the first reply from the journal. The work itself is idempotent too (a launch of a
 * running shard, a stop of a stopped one, a delete of a missing one all succeed), which
 * covers a retry that reaches an agent restarted in between.
 */
@Injectable()
export class CommandsService {
  private readonly journal = new CommandJournal<CommandReply>();
  private readonly logger: Logger;

  constructor(
    @Inject(AGENT_CONFIG) private readonly config: AgentConfig,
    private readonly shards: ShardsService,
    private readonly reconcileRequests: ReconcileRequests,
    private readonly memory: MemoryCommands,
    @Inject(LOGGER) logger: Logger,
  ) {
    this.logger = logger.child({ module: 'commands' });
  }

  handle(command: Command): Promise<CommandReply> {
    const { reply, repeated } = this.journal.once(command.commandId, () => this.execute(command));
    if (repeated) {
      this.logger.info(
        { commandId: command.commandId, type: command.type },
        'repeated command answered from the journal',
      );
    }
    return reply;
  }

  private async execute(command: Command): Promise<CommandReply> {
    const shardId =
      command.type === 'reconcile'
        ? undefined
        : command.type === 'launch'
          ? command.shard.shardId
          : command.shardId;
    this.logger.info(
      { commandId: command.commandId, type: command.type, shardId },
      'command received',
    );
    if (command.hostId !== this.config.hostId) {
      return this.refuse(
        command,
        'WRONG_HOST',
        `this agent is host ${this.config.hostId}, the command is for ${command.hostId}`,
      );
    }
    if (shardId !== undefined) this.shards.noteCommand(shardId);
    try {
      const result = await this.run(command);
      return {
        protocolVersion: PROTOCOL_VERSION,
        hostId: this.config.hostId,
        commandId: command.commandId,
        ok: true,
        result,
      };
    } catch (error) {
      return this.refuse(command, errorCode(error), errorMessage(error));
    }
  }

  private async run(command: Command): Promise<CommandResult> {
    switch (command.type) {
      case 'launch': {
        const launched = await this.shards.launch(command.shard);
        return { type: 'launch', ...launched };
      }
      case 'stop':
        return { type: 'stop', ...(await this.shards.stop(command.shardId, command.graceSeconds)) };
      case 'delete':
        return { type: 'delete', ...(await this.shards.delete(command.shardId)) };
      case 'resize':
        await this.shards.resize(command.shardId, command.gpus, command.compute);
        return { type: 'resize', gpus: command.gpus };
      case 'reconcile':
        this.reconcileRequests.request();
        return { type: 'reconcile' };
      case 'suspend':
        return {
          type: 'suspend',
          memory: await this.memory.suspend(command.shardId, command.cause, command.shardVersion),
        };
      case 'resume':
        return {
          type: 'resume',
          memory: await this.memory.resume(command.shardId, command.shardVersion),
        };
    }
  }

  private refuse(command: Command, code: string, message: string): CommandReply {
    this.logger.warn(
      { commandId: command.commandId, type: command.type, code, reason: message },
      'command refused',
    );
    return {
      protocolVersion: PROTOCOL_VERSION,
      hostId: this.config.hostId,
      commandId: command.commandId,
      ok: false,
      error: { code, message: protocolText(message) },
    };
  }
}

function errorCode(error: unknown): string {
  if (error instanceof UnknownShardError) return 'UNKNOWN_SHARD';
  if (error instanceof UnknownGpuError) return 'UNKNOWN_GPU';
  if (error instanceof BelowUsageError) return 'BELOW_USAGE';
  if (error instanceof RuntimeError) return 'RUNTIME_ERROR';
  if (error instanceof NotSuspendableError) return 'NOT_SUSPENDABLE';
  if (error instanceof StaleCommandError) return 'STALE_COMMAND';
  return 'INTERNAL';
}
