import { Inject, Injectable } from '@nestjs/common';
import {
  AGENT_MESSAGE_SCHEMAS,
  PROTOCOL_VERSION,
  REGISTER_REJECTION_CODES,
  checkSubjectHost,
  decodeMessage,
  encodeMessage,
  hostIdFromSubject,
  protocolText,
  reconcileReplySchema,
  registerReplySchema,
  type AgentSubjectKind,
  type DecodeErrorCode,
  type Heartbeat,
  type ReconcileRequest,
  type RegisterRequest,
  type ShardStateEvent,
  type ShardWake,
} from '@gpushards/protocol';
import { Counter, Registry } from 'prom-client';
import type { z } from 'zod';
import { NotFoundError } from '../errors/domain-errors.js';
import { ElasticService } from '../elastic/elastic.service.js';
import { CapPolicies } from '../fence/cap-policies.js';
import { FenceService } from '../fence/fence.service.js';
import {
  AgentReportsService,
  type HeartbeatOutcome,
  type StateEventOutcome,
} from '../fleet/agent-reports.service.js';
import { RemovedHosts } from '../fleet/removed-hosts.js';
import { LOGGER, type Logger } from '../logging/logger.js';
import type { AgentMessage } from './agent-transport.js';
import { WriteBatcher } from './write-batcher.js';

/** How the handling of one agent message ended: the `outcome` label of the counter. */
export type AgentMessageOutcome =
  | 'handled'
  /** The body could not be decoded (MALFORMED, INVALID, UNSUPPORTED_VERSION). */
  | 'undecodable'
  /** The body's hostId is not the subject's host. */
  | 'host_mismatch'
  /** Not a subject of the protocol (it names no valid host or kind). */
  | 'invalid_subject'
  /** From a host that never registered (heartbeat, reconcile). */
  | 'unknown_host'
  /** From a host that removeHost retired: dropped (a registration rejected). */
  | 'removed_host'
  /** The fleet service failed (the database); requests get no answer and are retried. */
  | 'failed';

type DecodeError = { code: DecodeErrorCode; message: string };

/** Rejection code of a register request that cannot be decoded (not a version problem). */
export const INVALID_REGISTER_REQUEST = 'INVALID_REQUEST';

/**
 * How long a shard state event waits for others before they are written together. Short next
 * to what an agent waits for the answer (seconds) and to a container's start.
 */
export const STATE_EVENT_GATHER_MS = 10;

/**
 * The control plane's answer to everything agents send, whichever transport carried it:
 * decodes each message with libs/protocol, checks its hostId against its subject, and calls
 * AgentReportsService. Never throws: a bad message is logged, counted and dropped (a register
 * request gets a rejection), and the next one is handled as usual.
 */
@Injectable()
export class AgentMessagesService {
  private readonly logger: Logger;
  private readonly messages: Counter<'kind' | 'outcome'>;

  /** Heartbeats arriving close together are written together. */
  private readonly heartbeats: WriteBatcher<
    { hostId: string; heartbeat: Heartbeat },
    HeartbeatOutcome
  >;
  /**
   * State events too, but none waits for company: what arrives while a batch is written goes
   * in the next (group commit), so a lone event is applied as soon as it comes.
   */
  private readonly stateEvents: WriteBatcher<
    { hostId: string; event: ShardStateEvent },
    StateEventOutcome
  >;

  constructor(
    private readonly fleet: AgentReportsService,
    private readonly fence: FenceService,
    private readonly capPolicies: CapPolicies,
    private readonly removedHosts: RemovedHosts,
    private readonly elastic: ElasticService,
    registry: Registry,
    @Inject(LOGGER) logger: Logger,
  ) {
    this.logger = logger.child({ module: 'agent-link' });
    this.heartbeats = new WriteBatcher((beats) => fleet.recordHeartbeats(beats));
    // State events wait up to STATE_EVENT_GATHER_MS for others: each batch is a transaction
    // of four statements, and with group commit alone they came 2.4 to a batch at 200
    // createShard/s (two events per shard), the largest share of the database's statements.
    this.stateEvents = new WriteBatcher((events) => fleet.applyShardStateEvents(events), {
      maxBatch: 256,
      maxWaitMs: STATE_EVENT_GATHER_MS,
    });
    this.messages = new Counter({
      name: 'gpushards_agent_messages_total',
      help:
        'Messages from agents by kind (register, heartbeat, state, reconcile) and outcome ' +
        '(handled, undecodable, host_mismatch, invalid_subject, unknown_host, removed_host, failed).',
      labelNames: ['kind', 'outcome'],
      registers: [registry],
    });
  }

  /** Handles one message; resolves to the encoded reply for register and reconcile. */
  async handle(message: AgentMessage): Promise<string | undefined> {
    const subject = hostIdFromSubject(message.subject);
    if (!subject.ok || subject.direction !== 'agent') {
      const reason = subject.ok ? 'is not a subject agents send on' : subject.error.message;
      this.drop('unknown', 'invalid_subject', { subject: message.subject, reason });
      return undefined;
    }
    const { hostId, kind } = subject;
    const decoded = decodeMessage(
      AGENT_MESSAGE_SCHEMAS[kind] as z.ZodType<{ hostId: string }>,
      message.data,
    );
    if (!decoded.ok) {
      this.drop(kind, 'undecodable', {
        hostId,
        code: decoded.error.code,
        reason: decoded.error.message,
      });
      return kind === 'register' ? this.rejectRegistration(hostId, decoded.error) : undefined;
    }
    const bound = checkSubjectHost(message.subject, decoded.message);
    if (!bound.ok) {
      this.drop(kind, 'host_mismatch', { hostId, reason: bound.error.message });
      return undefined;
    }
    try {
      if (await this.removedHosts.has(hostId)) {
        this.drop(kind, 'removed_host', { hostId });
        return kind === 'register' ? this.rejectRemovedHost(hostId) : undefined;
      }
      const { outcome, reply } = await this.dispatch(kind, hostId, decoded.message);
      this.messages.inc({ kind, outcome });
      return reply;
    } catch (error) {
      this.messages.inc({ kind, outcome: 'failed' });
      this.logger.error({ err: error, hostId, kind }, 'could not handle an agent message');
      return undefined;
    }
  }

  private async dispatch(
    kind: AgentSubjectKind,
    hostId: string,
    message: unknown,
  ): Promise<{ outcome: AgentMessageOutcome; reply?: string }> {
    switch (kind) {
      case 'register':
        return { outcome: 'handled', reply: await this.register(message as RegisterRequest) };
      case 'heartbeat':
        return { outcome: await this.heartbeat(hostId, message as Heartbeat) };
      case 'state':
        await this.state(hostId, message as ShardStateEvent);
        return { outcome: 'handled' };
      case 'reconcile':
        return this.reconcile(hostId, message as ReconcileRequest);
      case 'wake':
        await this.elastic.wake(hostId, message as ShardWake);
        return { outcome: 'handled' };
    }
  }

  private async register(request: RegisterRequest): Promise<string> {
    const reply = await this.fleet.registerHost(request);
    return encodeMessage(
      registerReplySchema,
      reply.accepted
        ? { ...reply, desired: await this.capPolicies.withCurrentPolicies(reply.desired) }
        : reply,
    );
  }

  private async heartbeat(hostId: string, heartbeat: Heartbeat): Promise<AgentMessageOutcome> {
    const outcome = await this.heartbeats.record({ hostId, heartbeat });
    if (!outcome.known) {
      // Its agent registers again when its link comes back; until then nothing is recorded.
      this.logger.warn({ hostId }, 'heartbeat from a host that never registered; ignored');
      return 'unknown_host';
    }
    await this.fence.recordFindings(hostId, heartbeat);
    this.logger.debug(
      { hostId, sequence: heartbeat.sequence, samples: outcome.samplesWritten },
      'heartbeat',
    );
    return 'handled';
  }

  private async state(hostId: string, event: ShardStateEvent): Promise<void> {
    const outcome = await this.stateEvents.record({ hostId, event });
    const fields = {
      hostId,
      shardId: event.shardId,
      reported: event.state,
      eventId: event.eventId,
    };
    if (outcome.applied) {
      this.logger.debug({ ...fields, state: outcome.state }, 'shard state event applied');
    } else if (outcome.reason === 'other-host' || outcome.reason === 'unknown-shard') {
      this.logger.warn({ ...fields, reason: outcome.reason }, 'shard state event ignored');
    } else {
      this.logger.debug({ ...fields, reason: outcome.reason }, 'shard state event ignored');
    }
  }

  private async reconcile(
    hostId: string,
    request: ReconcileRequest,
  ): Promise<{ outcome: AgentMessageOutcome; reply?: string }> {
    try {
      const answer = await this.fleet.reconcile(hostId, request);
      // Running shards take their team's cap policy from here (the agent applies it), as the
      // database has it: setTeamCapPolicy asks the team's hosts to reconcile at once.
      const reply = {
        ...answer,
        desired: await this.capPolicies.withCurrentPolicies(answer.desired),
      };
      return { outcome: 'handled', reply: encodeMessage(reconcileReplySchema, reply) };
    } catch (error) {
      if (!(error instanceof NotFoundError)) throw error;
      // A reconcile reply has no error form, and an empty desired set would make the agent
      // remove every shard: no answer, the agent tries again later.
      this.logger.warn({ hostId }, 'reconcile from a host that never registered; not answered');
      return { outcome: 'unknown_host' };
    }
  }

  /** removeHost retired this host: its agent is told so, once per registration. */
  private rejectRemovedHost(hostId: string): string {
    return encodeMessage(registerReplySchema, {
      protocolVersion: PROTOCOL_VERSION,
      hostId,
      accepted: false,
      error: {
        code: REGISTER_REJECTION_CODES.HOST_DISABLED,
        message: `host ${hostId} was removed from this fleet (removeHost); this agent is refused`,
      },
    });
  }

  /** Retrying cannot help an agent whose register request we cannot read: reject it. */
  private rejectRegistration(hostId: string, error: DecodeError): string {
    return encodeMessage(registerReplySchema, {
      protocolVersion: PROTOCOL_VERSION,
      hostId,
      accepted: false,
      error: {
        code:
          error.code === 'UNSUPPORTED_VERSION'
            ? REGISTER_REJECTION_CODES.AGENT_UNSUPPORTED
            : INVALID_REGISTER_REQUEST,
        message: protocolText(error.message),
      },
    });
  }

  private drop(
    kind: AgentSubjectKind | 'unknown',
    outcome: AgentMessageOutcome,
    fields: Record<string, unknown>,
  ): void {
    this.messages.inc({ kind, outcome });
    this.logger.warn({ ...fields, kind, outcome }, 'dropped an agent message');
  }
}
