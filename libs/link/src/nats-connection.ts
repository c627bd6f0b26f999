import { readFileSync } from 'node:fs';

import { errorMessage, type NatsAuth } from '@gpushards/protocol';
import {
  connect,
  credsAuthenticator,
  nkeyAuthenticator,
  usernamePasswordAuthenticator,
  type Authenticator,
  type ConnectionOptions,
  type NatsConnection,
} from '@nats-io/transport-node';
import type { Logger } from 'pino';

/** The nats.js authenticator for one of the ways an agent, a control plane or a test logs in. */
export function natsAuthenticator(auth: NatsAuth | undefined): Authenticator | undefined {
  if (auth === undefined) return undefined;
  switch (auth.kind) {
    case 'password':
      return usernamePasswordAuthenticator(auth.user, auth.password);
    case 'nkey':
      return nkeyAuthenticator(
        new TextEncoder().encode(readSecret(auth.seedFile, 'NATS nkey seed').trim()),
      );
    case 'creds':
      return credsAuthenticator(
        new TextEncoder().encode(readSecret(auth.credsFile, 'NATS credentials')),
      );
  }
}

export interface NatsLinkConnectOptions {
  /** nats://host:port, one or more (the servers of a cluster). */
  readonly servers: readonly string[];
  /** None: the server allows anonymous connections (development only). */
  readonly auth?: NatsAuth | undefined;
  /** The connection's name as the server shows it. */
  readonly name: string;
  /** Where replies to this connection's requests arrive (an agent's own inbox). */
  readonly inboxPrefix?: string;
  /** Called after every reconnection. */
  readonly onReconnect?: () => void;
  /** Passed on to nats.js as they are (tests, the simulator). */
  readonly extra?: Partial<ConnectionOptions>;
}

/**
 * How long one attempt to connect (or reconnect) to a server may take before the next server
 * or attempt. nats.js waits 20 s by default: after the whole NATS cluster restarted, a
 * reconnect attempt caught by the restart hung that long, longer than a host may stay silent
 * before it is marked OFFLINE (e2e "restart nats-server"). A server that answers at all answers
 * in milliseconds; 5 s leaves room for a loaded machine's nkey handshake.
 */
const CONNECT_TIMEOUT_MS = 5_000;

/**
 * Connects to NATS the way both apps do: reconnecting for ever after a loss (to any server of
 * the list), logging disconnects, reconnects and server errors (permission violations arrive
 * as errors). Rejects when no server takes the connection.
 */
export async function connectNats(
  options: NatsLinkConnectOptions,
  logger: Logger,
): Promise<NatsConnection> {
  const authenticator = natsAuthenticator(options.auth);
  let connection: NatsConnection;
  try {
    connection = await connect({
      servers: [...options.servers],
      name: options.name,
      maxReconnectAttempts: -1,
      timeout: CONNECT_TIMEOUT_MS,
      // Otherwise every request builds an Error up front for the stack of a possible timeout
      // (0.9 % of a control plane's samples under createShard load); ours name the subject.
      noAsyncTraces: true,
      ...(options.inboxPrefix !== undefined ? { inboxPrefix: options.inboxPrefix } : {}),
      ...(authenticator ? { authenticator } : {}),
      ...options.extra,
    });
  } catch (error) {
    throw new Error(
      `cannot connect to NATS at ${options.servers.join(', ')}: ${errorMessage(error)}`,
      { cause: error },
    );
  }
  void watchStatus(connection, logger, options.onReconnect);
  logger.info({ servers: options.servers }, 'connected to NATS');
  return connection;
}

async function watchStatus(
  connection: NatsConnection,
  logger: Logger,
  onReconnect: (() => void) | undefined,
): Promise<void> {
  for await (const status of connection.status()) {
    switch (status.type) {
      case 'disconnect':
        logger.warn({ server: status.server }, 'lost the NATS connection; reconnecting');
        break;
      case 'reconnect':
        logger.info({ server: status.server }, 'NATS connection restored');
        onReconnect?.();
        break;
      case 'error':
        // Permission violations arrive here: a subject this connection's user may not use.
        logger.error({ err: status.error }, 'NATS reported an error');
        break;
      default:
        break;
    }
  }
}

function readSecret(path: string, what: string): string {
  try {
    return readFileSync(path, 'utf8');
  } catch (error) {
    throw new Error(`cannot read the ${what} file ${path}: ${errorMessage(error)}`, {
      cause: error,
    });
  }
}
