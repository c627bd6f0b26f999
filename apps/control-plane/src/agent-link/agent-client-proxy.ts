import { hostSubjects } from '@gpushards/protocol';
import { ClientProxy, type ReadPacket, type WritePacket } from '@nestjs/microservices';
import { lastValueFrom } from 'rxjs';

import type { AgentTransport } from './agent-transport.js';

/** One encoded command for one host, as AgentClientProxy sends it. */
export interface AgentCommandPacket {
  readonly hostId: string;
  /** The command, encoded with libs/protocol. */
  readonly data: string;
  /** How long this attempt waits for the agent's reply. */
  readonly timeoutMs: number;
}

/**
 * The control plane's NestJS client of the agents' microservices (the agent's
 * AgentLinkServer): `send(pattern, packet)` carries one encoded command to the host's agent
 * over the AgentTransport (NATS request on gpushards.host.<h>.cmd, or the in-process hub) and
 * emits the agent's encoded reply; the observable errors with CommandNotDeliveredError when
 * no agent answered in time. The transport belongs to whoever opened it.
 */
export class AgentClientProxy extends ClientProxy {
  constructor(private readonly transport: AgentTransport) {
    super();
  }

  /** Sends one command and resolves to the agent's encoded reply. */
  command(packet: AgentCommandPacket): Promise<Uint8Array | string> {
    return lastValueFrom(
      this.send<Uint8Array | string, AgentCommandPacket>(hostSubjects(packet.hostId).cmd, packet),
    );
  }

  async connect(): Promise<void> {}

  close(): void {}

  unwrap<T>(): T {
    return this.transport as T;
  }

  protected publish(
    packet: ReadPacket<AgentCommandPacket>,
    callback: (packet: WritePacket) => void,
  ): () => void {
    const { hostId, data, timeoutMs } = packet.data;
    this.transport.sendCommand(hostId, data, timeoutMs).then(
      (response) => callback({ response, isDisposed: true }),
      (err: unknown) => callback({ err, isDisposed: true }),
    );
    // A NATS request cannot be withdrawn; its reply is dropped once unsubscribed.
    return () => undefined;
  }

  protected dispatchEvent(): Promise<never> {
    return Promise.reject(new Error('agents take commands only (send), no events'));
  }
}
