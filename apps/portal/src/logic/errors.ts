/** API errors as people can act on them. */

export interface GraphQLErrorLike {
  readonly message: string;
  readonly extensions?: Readonly<Record<string, unknown>>;
}

export interface ErrorLike {
  readonly graphQLErrors?: readonly GraphQLErrorLike[];
  readonly networkError?: { readonly message: string } | undefined;
  readonly message?: string;
}

export interface Explained {
  readonly code: string;
  readonly title: string;
  readonly detail: string;
  readonly lines: readonly string[];
}

const TITLES: Record<string, string> = {
  UNAUTHENTICATED: 'Not signed in: the token was refused',
  FORBIDDEN: 'Not allowed with this token',
  QUOTA_EXCEEDED: "Over the team's quota",
  NO_CAPACITY: 'No host has room for it now',
  BAD_USER_INPUT: 'Check the input',
  NOT_FOUND: 'Not found',
  CONFLICT: 'Conflicts with what exists',
  RATE_LIMITED: 'Too many requests: wait a moment and retry',
};

const HINTS: Record<string, string> = {
  UNAUTHENTICATED:
    'Paste a current API token (gps_…). An admin creates team tokens; the first admin token is in the data folder (admin-token).',
  FORBIDDEN: 'Ask an admin, or sign in with a token of the right role.',
  QUOTA_EXCEEDED: 'Ask for less, stop or delete a shard, or ask an admin to raise the quota.',
  NO_CAPACITY: 'Ask for less memory or fewer GPUs, or wait until capacity frees up.',
};

/** The first GraphQL error (or the network error) of a failed request, explained. */
export function explainError(error: ErrorLike): Explained {
  const first = error.graphQLErrors?.[0];
  if (first === undefined) {
    const message = error.networkError?.message ?? error.message ?? 'request failed';
    return {
      code: 'NETWORK',
      title: 'The control plane did not answer',
      detail: message.replace(/^\[Network\]\s*/, ''),
      lines: ['Is it running? npm start prints its URL.'],
    };
  }
  const code = typeof first.extensions?.['code'] === 'string' ? first.extensions['code'] : 'ERROR';
  const lines: string[] = [];
  if (code === 'NO_CAPACITY') {
    const hosts = first.extensions?.['hosts'];
    if (Array.isArray(hosts)) {
      for (const host of hosts as { hostName?: string; hostId?: string; reason?: string }[]) {
        lines.push(`${host.hostId ?? host.hostName ?? '?'}: ${host.reason ?? '?'}`);
      }
    }
  }
  const hint = HINTS[code];
  if (hint !== undefined) lines.push(hint);
  return {
    code,
    title: TITLES[code] ?? 'The request failed',
    detail: first.message.replace(/^\[GraphQL\]\s*/, ''),
    lines,
  };
}
