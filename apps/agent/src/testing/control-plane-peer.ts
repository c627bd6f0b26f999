import { randomUUID } from 'node:crypto';

import {
  CONTROL_PLANE_QUEUE_GROUP,
  CONTROL_PLANE_SUBSCRIPTIONS,
  PROTOCOL_VERSION,
  checkSubjectHost,
  commandReplySchema,
  decodeMessage,
  encodeMessage,
  heartbeatSchema,
  hostSubjects,
  reconcileReplySchema,
  reconcileRequestSchema,
  registerReplySchema,
  registerRequestSchema,
  shardStateEventSchema,
  shardWakeSchema,
  type CommandReply,
  type Heartbeat,
  type LaunchCommand,
  type DeleteCommand,
  type ReconcileRequest,
  type RegisterRequest,
  type ReconcileCommand,
  type ResizeCommand,
  type ShardLaunchSpec,
  type ShardState,
  type ShardStateEvent,
  type StopCommand,
  type ResumeCommand,
  type ShardWake,
  type SuspendCommand,
} from '@gpushards/protocol';
import { connect, type Msg, type NatsConnection } from '@nats-io/transport-node';
import type { z } from 'zod';

import { natsAuthenticator, type NatsAuth } from '../link/nats-agent-link.js';
import { waitFor } from './processes.js';

type WithoutHeader<T> = T extends unknown
  ? Omit<T, 'protocolVersion' | 'hostId' | 'commandId'>
  : never;
export type CommandBody = WithoutHeader<
  | LaunchCommand
  | StopCommand
  | DeleteCommand
  | ResizeCommand
  | ReconcileCommand
  | SuspendCommand
  | ResumeCommand
>;

export interface HostDesiredState {
  desired: ShardLaunchSpec[];
  stoppedShardIds: string[];
  /** Run with their GPU memory in host RAM (a suspend taken on); their specs kept for a resume. */
  suspendedShardIds: string[];
}

/**
 * The control plane's side of the protocol, scripted for tests: it records what agents
 * send, answers register and reconcile from a per-host desired state that its own commands
 * keep current (as the real control plane's database would), and sends commands.
 */
export class ScriptedControlPlane {
  readonly registers: RegisterRequest[] = [];
  readonly heartbeats: Heartbeat[] = [];
  readonly states: ShardStateEvent[] = [];
  readonly reconciles: ReconcileRequest[] = [];
  readonly wakes: ShardWake[] = [];
  /** The launch spec of every shard launched, for a resume to put back in `desired`. */
  private readonly specs = new Map<string, ShardLaunchSpec>();
  readonly problems: string[] = [];
  readonly desired = new Map<string, HostDesiredState>();
  rejectRegistration: { code: string; message: string } | undefined;
  /** Leave reconciles unanswered, as a control plane that does not know the host does. */
  ignoreReconciles = false;

  private constructor(private readonly connection: NatsConnection) {}

  static async connect(url: string, auth: NatsAuth): Promise<ScriptedControlPlane> {
    const authenticator = natsAuthenticator(auth);
    const peer = new ScriptedControlPlane(
      await connect({ servers: url, ...(authenticator ? { authenticator } : {}) }),
    );
    peer.listen();
    await peer.connection.flush();
    return peer;
  }

  stateOf(hostId: string): HostDesiredState {
    let state = this.desired.get(hostId);
    if (state === undefined) {
      state = { desired: [], stoppedShardIds: [], suspendedShardIds: [] };
      this.desired.set(hostId, state);
    }
    return state;
  }

  /** Sends a command and waits for the reply; on success updates the desired state. */
  async command(
    hostId: string,
    body: CommandBody,
    commandId: string = randomUUID(),
  ): Promise<CommandReply> {
    const reply = await this.sendRaw(
      hostId,
      JSON.stringify({ protocolVersion: PROTOCOL_VERSION, hostId, commandId, ...body }),
    );
    if (reply.ok) this.remember(hostId, body);
    return reply;
  }

  /** Sends any bytes on the host's command subject and decodes the reply. */
  async sendRaw(hostId: string, data: string, timeoutMs = 30_000): Promise<CommandReply> {
    const msg = await this.connection.request(hostSubjects(hostId).cmd, data, {
      timeout: timeoutMs,
    });
    const decoded = decodeMessage(commandReplySchema, msg.data);
    if (!decoded.ok) throw new Error(`unusable command reply: ${decoded.error.message}`);
    return decoded.message;
  }

  statesOf(shardId: string): ShardStateEvent[] {
    return this.states.filter((event) => event.shardId === shardId);
  }

  waitForState(
    shardId: string,
    state: ShardState,
    timeoutMs = 20_000,
    after = 0,
  ): Promise<ShardStateEvent> {
    return waitFor(
      `shard ${shardId} to report ${state} (saw ${this.statesOf(shardId)
        .map((event) => event.state)
        .join(', ')})`,
      () =>
        this.states
          .slice(after)
          .find((event) => event.shardId === shardId && event.state === state),
      timeoutMs,
    );
  }

  async close(): Promise<void> {
    await this.connection.drain();
  }

  private remember(hostId: string, body: CommandBody): void {
    const state = this.stateOf(hostId);
    const without = (shardId: string) => {
      state.desired = state.desired.filter((spec) => spec.shardId !== shardId);
      state.stoppedShardIds = state.stoppedShardIds.filter((id) => id !== shardId);
      state.suspendedShardIds = state.suspendedShardIds.filter((id) => id !== shardId);
    };
    switch (body.type) {
      case 'launch':
        without(body.shard.shardId);
        state.desired.push(body.shard);
        this.specs.set(body.shard.shardId, body.shard);
        break;
      case 'suspend':
        without(body.shardId);
        state.suspendedShardIds.push(body.shardId);
        break;
      case 'resume': {
        const spec = this.specs.get(body.shardId);
        without(body.shardId);
        if (spec !== undefined) state.desired.push(spec);
        break;
      }
      case 'stop':
        without(body.shardId);
        state.stoppedShardIds.push(body.shardId);
        break;
      case 'delete':
        without(body.shardId);
        break;
      case 'resize':
        state.desired = state.desired.map((spec) =>
          spec.shardId === body.shardId ? { ...spec, gpus: body.gpus } : spec,
        );
        break;
    }
  }

  private listen(): void {
    const on = <S extends z.ZodType>(
      subject: string,
      schema: S,
      handle: (message: z.output<S>, msg: Msg) => void,
    ): void => {
      this.connection.subscribe(subject, {
        queue: CONTROL_PLANE_QUEUE_GROUP,
        callback: (error, msg) => {
          if (error) return void this.problems.push(error.message);
          const decoded = decodeMessage(schema, msg.data);
          if (!decoded.ok) return void this.problems.push(decoded.error.message);
          const bound = checkSubjectHost(msg.subject, decoded.message as { hostId: string });
          if (!bound.ok) return void this.problems.push(bound.error.message);
          handle(decoded.message, msg);
        },
      });
    };
    on(CONTROL_PLANE_SUBSCRIPTIONS.register, registerRequestSchema, (request, msg) => {
      this.registers.push(request);
      const header = { protocolVersion: PROTOCOL_VERSION, hostId: request.hostId } as const;
      msg.respond(
        encodeMessage(
          registerReplySchema,
          this.rejectRegistration
            ? { ...header, accepted: false, error: this.rejectRegistration }
            : { ...header, accepted: true, ...this.stateOf(request.hostId) },
        ),
      );
    });
    on(CONTROL_PLANE_SUBSCRIPTIONS.heartbeat, heartbeatSchema, (heartbeat) =>
      this.heartbeats.push(heartbeat),
    );
    on(CONTROL_PLANE_SUBSCRIPTIONS.state, shardStateEventSchema, (event) => {
      this.states.push(event);
      // As the control plane's lifecycle does, so that the next reconcile does not retry the
      // move: suspend-failed (SUSPENDING -> RUNNING) wants the shard resident again,
      // resume-failed (RESUMING -> SUSPENDED) suspended until its queue resumes it again.
      const state = this.stateOf(event.hostId);
      const spec = this.specs.get(event.shardId);
      if (event.state === 'SUSPEND_FAILED' && state.suspendedShardIds.includes(event.shardId)) {
        state.suspendedShardIds = state.suspendedShardIds.filter((id) => id !== event.shardId);
        if (spec !== undefined) state.desired.push(spec);
      }
      if (
        event.state === 'RESUME_FAILED' &&
        state.desired.some((d) => d.shardId === event.shardId)
      ) {
        state.desired = state.desired.filter((d) => d.shardId !== event.shardId);
        state.suspendedShardIds.push(event.shardId);
      }
    });
    on(CONTROL_PLANE_SUBSCRIPTIONS.wake, shardWakeSchema, (wake) => this.wakes.push(wake));
    on(CONTROL_PLANE_SUBSCRIPTIONS.reconcile, reconcileRequestSchema, (request, msg) => {
      this.reconciles.push(request);
      if (this.ignoreReconciles) return;
      msg.respond(
        encodeMessage(reconcileReplySchema, {
          protocolVersion: PROTOCOL_VERSION,
          hostId: request.hostId,
          ...this.stateOf(request.hostId),
        }),
      );
    });
  }
}
