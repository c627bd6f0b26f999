import { assertValidHostId, isValidHostId } from './primitives.js';

/**
 * One subject space per host, split by direction so that NATS permissions are two
 * wildcards per agent:
 *   gpushards.agent.<hostId>.<kind>  published by that host's agent
 *   gpushards.host.<hostId>.<kind>   published by the control plane for that host
 * Replies to requests go to the requester's inbox; agents use a per-host inbox prefix
 * so that no agent can read another host's replies (see README.md, "Permissions").
 */
export const SUBJECT_ROOT = 'gpushards';

export const AGENT_SUBJECT_KINDS = ['register', 'heartbeat', 'state', 'reconcile', 'wake'] as const;
export type AgentSubjectKind = (typeof AGENT_SUBJECT_KINDS)[number];

export const HOST_SUBJECT_KINDS = ['cmd'] as const;
export type HostSubjectKind = (typeof HOST_SUBJECT_KINDS)[number];

/** The queue group every control-plane replica joins, so each message is handled once. */
export const CONTROL_PLANE_QUEUE_GROUP = 'gpushards-control-plane';

export type AgentSubjects = Readonly<Record<AgentSubjectKind, string>>;

/** What an agent publishes (register and reconcile are requests; the others plain publishes). */
export function agentSubjects(hostId: string): AgentSubjects {
  assertValidHostId(hostId);
  return {
    register: `${SUBJECT_ROOT}.agent.${hostId}.register`,
    heartbeat: `${SUBJECT_ROOT}.agent.${hostId}.heartbeat`,
    state: `${SUBJECT_ROOT}.agent.${hostId}.state`,
    reconcile: `${SUBJECT_ROOT}.agent.${hostId}.reconcile`,
    wake: `${SUBJECT_ROOT}.agent.${hostId}.wake`,
  };
}

export type HostSubjects = Readonly<Record<HostSubjectKind, string>>;

/** What the control plane sends to one host (commands are requests). */
export function hostSubjects(hostId: string): HostSubjects {
  assertValidHostId(hostId);
  return { cmd: `${SUBJECT_ROOT}.host.${hostId}.cmd` };
}

/**
 * The inbox prefix an agent must pass to its NATS connection (`inboxPrefix`), so the
 * replies to its requests arrive where only it may subscribe.
 */
export function agentInboxPrefix(hostId: string): string {
  assertValidHostId(hostId);
  return `${SUBJECT_ROOT}.inbox.${hostId}`;
}

/** What the control plane subscribes to, each with `CONTROL_PLANE_QUEUE_GROUP`. */
export const CONTROL_PLANE_SUBSCRIPTIONS: AgentSubjects = {
  register: `${SUBJECT_ROOT}.agent.*.register`,
  heartbeat: `${SUBJECT_ROOT}.agent.*.heartbeat`,
  state: `${SUBJECT_ROOT}.agent.*.state`,
  reconcile: `${SUBJECT_ROOT}.agent.*.reconcile`,
  wake: `${SUBJECT_ROOT}.agent.*.wake`,
};

export type ParsedSubject =
  | { direction: 'agent'; hostId: string; kind: AgentSubjectKind }
  | { direction: 'host'; hostId: string; kind: HostSubjectKind };

export type SubjectParseResult =
  | ({ ok: true } & ParsedSubject)
  | { ok: false; error: { code: 'INVALID_SUBJECT'; message: string } };

/** Reads the host id (and direction, kind) from a concrete subject. Never throws. */
export function hostIdFromSubject(subject: string): SubjectParseResult {
  const invalid = (why: string): SubjectParseResult => ({
    ok: false,
    error: { code: 'INVALID_SUBJECT', message: `subject ${JSON.stringify(subject)} ${why}` },
  });
  const tokens = subject.split('.');
  if (tokens.length !== 4 || tokens[0] !== SUBJECT_ROOT) {
    return invalid(`is not of the form ${SUBJECT_ROOT}.<agent|host>.<hostId>.<kind>`);
  }
  const [, direction, hostId = '', kind = ''] = tokens;
  if (!isValidHostId(hostId)) {
    return invalid(`has an invalid host id ${JSON.stringify(hostId)}`);
  }
  if (direction === 'agent' && isOneOf(AGENT_SUBJECT_KINDS, kind)) {
    return { ok: true, direction, hostId, kind };
  }
  if (direction === 'host' && isOneOf(HOST_SUBJECT_KINDS, kind)) {
    return { ok: true, direction, hostId, kind };
  }
  return invalid(
    `names no known message: expected agent.<hostId>.{${AGENT_SUBJECT_KINDS.join(',')}} ` +
      `or host.<hostId>.{${HOST_SUBJECT_KINDS.join(',')}}`,
  );
}

function isOneOf<T extends string>(values: readonly T[], value: string): value is T {
  return (values as readonly string[]).includes(value);
}

/** NATS authorization for one NATS user, in nats-server config terms. */
export interface NatsPermissions {
  publish: { allow: string[] };
  subscribe: { allow: string[] };
  /** Lets the user publish one reply to the reply subject of each request it received. */
  allow_responses: boolean;
}

/** What an agent's NATS user may do: nothing outside its own host's subjects. */
export function agentPermissions(hostId: string): NatsPermissions {
  assertValidHostId(hostId);
  return {
    publish: { allow: [`${SUBJECT_ROOT}.agent.${hostId}.>`] },
    subscribe: { allow: [`${SUBJECT_ROOT}.host.${hostId}.>`, `${agentInboxPrefix(hostId)}.>`] },
    allow_responses: true,
  };
}

/** What the control plane's NATS user may do. */
export const CONTROL_PLANE_PERMISSIONS: NatsPermissions = {
  publish: { allow: [`${SUBJECT_ROOT}.host.*.>`] },
  subscribe: { allow: [`${SUBJECT_ROOT}.agent.*.>`, '_INBOX.>'] },
  allow_responses: true,
};
