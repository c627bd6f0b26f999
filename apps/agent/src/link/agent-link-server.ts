import type { Command, CommandReply } from '@gpushards/protocol';
import { Server, type CustomTransportStrategy } from '@nestjs/microservices';
import { lastValueFrom } from 'rxjs';

import type { AgentLink } from './agent-link.js';

/** The pattern of each command's handler: `@MessagePattern(commandPattern('launch'))`. */
export function commandPattern(type: Command['type']): string {
  return `gpushards.command.${type}`;
}

/**
 * The agent's side of the link as a NestJS transport strategy: the agent runs as a
 * microservice (`NestFactory.createMicroservice(..., {strategy})`) whose `@MessagePattern`
 * handlers answer the control plane's commands. Whatever carries them (NATS on per-host
 * subjects with this host's own user and inbox, or the one-box's in-process hub) is the
 * AgentLink: it connects when the microservice listens, decodes each command and refuses a
 * bad one itself, and hands the well-formed ones here; each goes to the handler of its
 * type. The link closes with the microservice.
 */
export class AgentLinkServer extends Server implements CustomTransportStrategy {
  constructor(private readonly link: AgentLink) {
    super();
  }

  async listen(callback: (error?: unknown) => void): Promise<void> {
    try {
      await this.link.connect();
      await this.link.onCommand((command) => this.dispatch(command));
    } catch (error) {
      callback(error);
      return;
    }
    callback();
  }

  async close(): Promise<void> {
    await this.link.close();
  }

  on(): never {
    throw new Error('the agent link server emits no events');
  }

  unwrap<T>(): T {
    return this.link as T;
  }

  private async dispatch(command: Command): Promise<CommandReply> {
    const handler = this.getHandlerByPattern(commandPattern(command.type));
    if (handler === null) {
      throw new Error(`no handler for ${command.type} commands`);
    }
    return lastValueFrom(this.transformToObservable<CommandReply>(await handler(command)));
  }
}
