import {
  AgentLinkBase,
  answerCommand,
  assertValidHostId,
  commandReplySchema,
  encodeMessage,
  hostSubjects,
  type Command,
  type CommandReply,
} from '@gpushards/protocol';
import {
  CommandNotDeliveredError,
  type AgentMessageHandler,
  type AgentTransport,
} from './agent-transport.js';

export interface InProcessAgentHubOptions {
  /**
   * The error an agent's register and reconcile reject with when no control plane answers.
   * Pass the agent's own (`(message) => new LinkUnavailableError(message)` from
   * @gpushards/agent): the agent retries on that error only. Default: an Error named
   * LinkUnavailableError.
   */
  readonly unavailableError?: (message: string) => Error;
  /** How long an agent's register and reconcile wait for the control plane; default 10 s. */
  readonly requestTimeoutMs?: number;
}

const DEFAULT_REQUEST_TIMEOUT_MS = 10_000;

/** Answers one command; what the agent passes to AgentLink.onCommand. */
export type InProcessCommandHandler = (command: Command) => Promise<CommandReply>;

/** What an agent's link registers with the hub while connected. */
interface ConnectedAgent {
  /** One encoded command in, its encoded reply out. */
  answer(data: string): Promise<string>;
  /** The control plane started listening (again). */
  restored(): void;
}

/** The hub as an agent's link sees it. */
interface HubPort {
  attach(hostId: string, agent: ConnectedAgent): void;
  detach(hostId: string, agent: ConnectedAgent): void;
  /** Delivered later, as a broker would; lost when no control plane listens. */
  publish(subject: string, data: string): void;
  /** The control plane's encoded reply; rejects with the unavailable error when none comes. */
  request(subject: string, data: string): Promise<string>;
  unavailable(message: string): Error;
}

/**
 * The link between a control plane and agents in the same process (the one-box mode), with
 * NATS's contract and no broker. The control plane listens on it as on NATS (pass it as
 * `createControlPlane({link: {inProcess: hub}})`); each agent gets its side from
 * `connectAgent(hostId)`, an object that satisfies the agent's AgentLink interface
 * (`createAgent({link: {custom: hub.connectAgent(hostId)}})`). Every message is encoded and
 * decoded with libs/protocol on the way, under the subject NATS would carry it on, so both
 * sides validate it exactly as over NATS.
 *
 * As on NATS: publishes with no control plane listening are lost; requests then fail at
 * once (the agent retries); a control plane that starts listening (again, after a restart)
 * counts as the link coming back, so connected agents register again.
 */
export class InProcessAgentHub implements AgentTransport {
  private handler: AgentMessageHandler | undefined;
  private readonly agents = new Map<string, ConnectedAgent>();
  private readonly inFlight = new Set<Promise<unknown>>();
  private readonly unavailableError: (message: string) => Error;
  private readonly requestTimeoutMs: number;
  private readonly port: HubPort;

  constructor(options: InProcessAgentHubOptions = {}) {
    this.unavailableError =
      options.unavailableError ??
      ((message) => Object.assign(new Error(message), { name: 'LinkUnavailableError' }));
    this.requestTimeoutMs = options.requestTimeoutMs ?? DEFAULT_REQUEST_TIMEOUT_MS;
    this.port = {
      attach: (hostId, agent) => {
        const present = this.agents.get(hostId);
        if (present !== undefined && present !== agent) {
          throw new Error(`host ${hostId} already has an agent connected to this hub`);
        }
        this.agents.set(hostId, agent);
      },
      detach: (hostId, agent) => {
        if (this.agents.get(hostId) === agent) this.agents.delete(hostId);
      },
      publish: (subject, data) => this.publish(subject, data),
      request: (subject, data) => this.request(subject, data),
      unavailable: (message) => this.unavailableError(message),
    };
  }

  /** The agent side of the link for one host; one connected agent per host at a time. */
  connectAgent(hostId: string): InProcessAgentLink {
    assertValidHostId(hostId);
    return new InProcessAgentLink(this.port, hostId);
  }

  // The control plane's side (AgentTransport).

  async listen(handler: AgentMessageHandler): Promise<void> {
    this.handler = handler;
    for (const agent of this.agents.values()) agent.restored();
  }

  async stopListening(): Promise<void> {
    this.handler = undefined;
    await Promise.allSettled([...this.inFlight]);
  }

  async sendCommand(hostId: string, data: string, timeoutMs: number): Promise<string> {
    const agent = this.agents.get(hostId);
    if (agent === undefined) {
      throw new CommandNotDeliveredError(`no agent of host ${hostId} is connected`);
    }
    return withTimeout(
      agent.answer(data),
      timeoutMs,
      () =>
        new CommandNotDeliveredError(`host ${hostId}'s agent did not answer in ${timeoutMs} ms`),
    );
  }

  private publish(subject: string, data: string): void {
    const handler = this.handler;
    if (handler === undefined) return;
    this.track(
      new Promise((resolve) => setImmediate(resolve)).then(() => handler({ subject, data })),
    );
  }

  private async request(subject: string, data: string): Promise<string> {
    const handler = this.handler;
    if (handler === undefined) {
      throw this.unavailableError(`no control plane listens for ${subject}`);
    }
    const reply = await withTimeout(
      this.track(handler({ subject, data })),
      this.requestTimeoutMs,
      () =>
        this.unavailableError(
          `the control plane did not answer on ${subject} in ${this.requestTimeoutMs} ms`,
        ),
    );
    if (reply === undefined) {
      throw this.unavailableError(`the control plane did not answer on ${subject}`);
    }
    return reply;
  }

  private track<T>(work: Promise<T>): Promise<T> {
    this.inFlight.add(work);
    void work.catch(() => undefined).finally(() => this.inFlight.delete(work));
    return work;
  }
}

/**
 * One agent's side of an InProcessAgentHub. Structurally the agent's AgentLink (connect,
 * register, reconcile, heartbeat, publishState, onCommand, onRestored, close), so the agent
 * takes it as `link: {custom}` without either package importing the other. The messages
 * themselves are AgentLinkBase's (libs/protocol), as NatsAgentLink's are: this class is the
 * transport alone.
 */
export class InProcessAgentLink extends AgentLinkBase {
  private commandHandler: InProcessCommandHandler | undefined;
  private connected = false;
  private readonly self: ConnectedAgent = {
    answer: (data) => this.answer(data),
    restored: () => this.restored(),
  };

  constructor(
    private readonly hub: HubPort,
    hostId: string,
  ) {
    super(hostId);
  }

  async connect(): Promise<void> {
    this.hub.attach(this.hostId, this.self);
    this.connected = true;
  }

  async onCommand(handler: InProcessCommandHandler): Promise<void> {
    this.commandHandler = handler;
  }

  async close(): Promise<void> {
    this.connected = false;
    this.commandHandler = undefined;
    this.hub.detach(this.hostId, this.self);
  }

  protected override publish(subject: string, data: string): void {
    this.assertConnected();
    this.hub.publish(subject, data);
  }

  protected override send(subject: string, data: string): Promise<string> {
    this.assertConnected();
    return this.hub.request(subject, data);
  }

  /**
   * Answers as NatsAgentLink does: undecodable commands and commands for another host are
   * refused here, the agent's handler sees only well-formed ones.
   */
  private async answer(data: string): Promise<string> {
    const handler = this.commandHandler;
    if (handler === undefined) {
      throw new CommandNotDeliveredError(`host ${this.hostId}'s agent takes no commands`);
    }
    const reply = await answerCommand(this.hostId, hostSubjects(this.hostId).cmd, data, handler);
    return encodeMessage(commandReplySchema, reply);
  }

  private assertConnected(): void {
    if (!this.connected) {
      throw this.hub.unavailable(`host ${this.hostId}'s in-process link is not connected`);
    }
  }
}

function withTimeout<T>(work: Promise<T>, ms: number, timedOut: () => Error): Promise<T> {
  return new Promise<T>((resolve, reject) => {
    const timer = setTimeout(() => reject(timedOut()), ms);
    work.then(
      (value) => {
        clearTimeout(timer);
        resolve(value);
      },
      (error: unknown) => {
        clearTimeout(timer);
        reject(error);
      },
    );
  });
}
