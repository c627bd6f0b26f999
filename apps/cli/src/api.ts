import type { TypedDocumentNode } from '@gpushards/graphql-client';
import { print } from 'graphql';
import { createClient } from 'graphql-ws';
import WebSocket from 'ws';
import type { Login } from './config.js';
import { CliError, EXIT, exitCodeFor } from './exit-codes.js';

interface GraphQLError {
  message: string;
  extensions?: Record<string, unknown>;
}

/** A person's session (gpss_…, from `gpushards login --sso`) or an API token (gps_…). */
function authorization(token: string): string {
  if (/^(bearer|session)\s/i.test(token)) return token;
  return token.startsWith('gpss_') ? `Session ${token}` : `Bearer ${token}`;
}

/** An API error as a CliError: the server's message, the code's exit code, NO_CAPACITY's hosts. */
export function apiError(error: GraphQLError): CliError {
  const code = typeof error.extensions?.['code'] === 'string' ? error.extensions['code'] : 'ERROR';
  const details: string[] = [];
  const hosts = error.extensions?.['hosts'];
  if (Array.isArray(hosts)) {
    for (const h of hosts as { hostName?: string; hostId?: string; reason?: string }[]) {
      details.push(`${h.hostName ?? h.hostId}: ${h.reason}`);
    }
  }
  if (code === 'UNAUTHENTICATED') {
    details.push('log in again with `gpushards login --sso` or `gpushards login --token gps_…`');
  }
  return new CliError(error.message, exitCodeFor(code), code, details);
}

export class Api {
  constructor(readonly login: Login) {}

  async request<R, V>(document: TypedDocumentNode<R, V>, variables?: V): Promise<R> {
    let response: Response;
    try {
      response = await fetch(`${this.login.url}/graphql`, {
        method: 'POST',
        headers: {
          'content-type': 'application/json',
          authorization: authorization(this.login.token),
        },
        body: JSON.stringify({ query: print(document), variables: variables ?? {} }),
      });
    } catch (error) {
      const cause = (error as { cause?: { code?: string; message?: string } }).cause;
      throw new CliError(
        `cannot reach the control plane at ${this.login.url} (${cause?.code ?? cause?.message ?? (error as Error).message})`,
        EXIT.UNREACHABLE,
        'UNREACHABLE',
      );
    }
    let body: { data?: R | null; errors?: GraphQLError[] };
    try {
      body = (await response.json()) as typeof body;
    } catch {
      throw new CliError(
        `${this.login.url}/graphql answered ${response.status} without JSON: is that a GPU Shards control plane?`,
        EXIT.ERROR,
      );
    }
    const first = body.errors?.[0];
    if (first) throw apiError(first);
    if (body.data === undefined || body.data === null) {
      throw new CliError(`empty answer (HTTP ${response.status})`, EXIT.ERROR);
    }
    return body.data;
  }

  /** A subscription over graphql-ws; resolves when it ends, rejects on an error. */
  subscribe<R, V>(
    document: TypedDocumentNode<R, V>,
    variables: V,
    onData: (data: R) => void,
  ): { done: Promise<void>; stop: () => void; connected: Promise<void> } {
    let onConnected: () => void = () => undefined;
    const connected = new Promise<void>((resolve) => (onConnected = resolve));
    const client = createClient({
      on: { connected: () => onConnected() },
      url: `${this.login.url.replace(/^http/, 'ws')}/graphql`,
      webSocketImpl: WebSocket,
      connectionParams: { Authorization: authorization(this.login.token) },
      retryAttempts: 0,
    });
    let stop = (): void => undefined;
    const done = new Promise<void>((resolve, reject) => {
      stop = client.subscribe<R>(
        { query: print(document), variables: variables as Record<string, unknown> },
        {
          next: (value) => {
            if (value.errors?.[0]) reject(apiError(value.errors[0] as GraphQLError));
            else if (value.data) onData(value.data);
          },
          error: (error) => {
            const closed = error as { code?: number; reason?: string };
            if (closed?.code === 4403 || closed?.code === 4401) {
              reject(
                new CliError(
                  `the token was refused (${closed.reason ?? closed.code})`,
                  EXIT.UNAUTHENTICATED,
                  'UNAUTHENTICATED',
                ),
              );
            } else if (Array.isArray(error)) {
              reject(apiError(error[0] as GraphQLError));
            } else {
              reject(
                new CliError(
                  `subscription failed: ${closed?.reason || (error as Error).message || String(closed?.code)}`,
                  EXIT.UNREACHABLE,
                  'UNREACHABLE',
                ),
              );
            }
          },
          complete: resolve,
        },
      );
    });
    return {
      connected,
      done: done.finally(() => void client.dispose()),
      stop: () => {
        stop();
        void client.dispose();
      },
    };
  }
}
