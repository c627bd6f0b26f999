import { Controller } from '@nestjs/common';
import { MessagePattern, Payload } from '@nestjs/microservices';
import type { Command, CommandReply } from '@gpushards/protocol';

import { commandPattern } from '../link/agent-link-server.js';
import { CommandsService } from './commands.service.js';

type Of<T extends Command['type']> = Extract<Command, { type: T }>;

/**
 * The control plane's commands, one handler per type. The link has decoded each and checked
 * it is for this host; CommandsService acts on each command id once.
 */
@Controller()
export class CommandsController {
  constructor(private readonly commands: CommandsService) {}

  @MessagePattern(commandPattern('launch'))
  launch(@Payload() command: Of<'launch'>): Promise<CommandReply> {
    return this.commands.handle(command);
  }

  @MessagePattern(commandPattern('stop'))
  stop(@Payload() command: Of<'stop'>): Promise<CommandReply> {
    return this.commands.handle(command);
  }

  @MessagePattern(commandPattern('delete'))
  delete(@Payload() command: Of<'delete'>): Promise<CommandReply> {
    return this.commands.handle(command);
  }

  @MessagePattern(commandPattern('resize'))
  resize(@Payload() command: Of<'resize'>): Promise<CommandReply> {
    return this.commands.handle(command);
  }

  @MessagePattern(commandPattern('suspend'))
  suspend(@Payload() command: Of<'suspend'>): Promise<CommandReply> {
    return this.commands.handle(command);
  }

  @MessagePattern(commandPattern('resume'))
  resume(@Payload() command: Of<'resume'>): Promise<CommandReply> {
    return this.commands.handle(command);
  }

  @MessagePattern(commandPattern('reconcile'))
  reconcile(@Payload() command: Of<'reconcile'>): Promise<CommandReply> {
    return this.commands.handle(command);
  }
}
