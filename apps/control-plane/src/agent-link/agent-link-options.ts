import { resolve } from 'node:path';
import { readEnvVariables, readNatsAuth } from '@gpushards/protocol';
import { z } from 'zod';
import { ConfigError } from '../config/control-plane-config.js';
import type { Logger } from '../logging/logger.js';
import {
  AgentCommandClient,
  DEFAULT_COMMAND_DELIVERY,
  type CommandDeliveryOptions,
} from './agent-command-client.js';
import type { AgentTransport } from './agent-transport.js';
import type { InProcessAgentHub } from './in-process-agent-hub.js';
import { NatsAgentTransport, type NatsConnectionOptions } from './nats-agent-transport.js';
import type { HostCredentials } from '../fleet/host-credentials.js';
import { NatsHostCredentials, readRevocationFile } from './nats-host-credentials.js';

/**
 * How the control plane reaches its agents: over NATS, or through an InProcessAgentHub that
 * an agent in the same process is connected to (the one-box mode). `commands` tunes how
 * shard commands are retried.
 */
export type AgentLinkOptions =
  | { readonly nats: NatsConnectionOptions; readonly commands?: CommandDeliveryOptions }
  | { readonly inProcess: InProcessAgentHub; readonly commands?: CommandDeliveryOptions };

/** The open link: the transport, the ShardCommands over it, and how to close what it owns. */
export interface OpenAgentLink {
  readonly transport: AgentTransport;
  readonly commands: AgentCommandClient;
  /** Where removed hosts' credentials are revoked (NATS --auth jwt); none: nowhere. */
  readonly hostCredentials?: HostCredentials;
  /** After the application closed: abandons command retries, closes a NATS connection. */
  close(): Promise<void>;
}

export async function openAgentLink(
  options: AgentLinkOptions,
  logger: Logger,
): Promise<OpenAgentLink> {
  const linkLogger = logger.child({ module: 'agent-link' });
  // The hub belongs to whoever created it; a NATS connection belongs to this control plane.
  let transport: AgentTransport;
  let owned: NatsAgentTransport | undefined;
  let hostCredentials: NatsHostCredentials | undefined;
  if ('inProcess' in options) {
    transport = options.inProcess;
  } else {
    const { revocationFile } = options.nats;
    // Read before connecting: a bad file stops the start with its reason.
    const revocation =
      revocationFile === undefined ? undefined : readRevocationFile(revocationFile);
    owned = await NatsAgentTransport.connect(options.nats, linkLogger);
    transport = owned;
    if (revocation !== undefined) {
      try {
        hostCredentials = await NatsHostCredentials.connect(
          options.nats.servers,
          revocation,
          linkLogger,
        );
      } catch (error) {
        await owned.close();
        throw error;
      }
    }
  }
  const commands = new AgentCommandClient(transport, options.commands ?? {}, linkLogger);
  return {
    transport,
    commands,
    ...(hostCredentials ? { hostCredentials } : {}),
    close: async () => {
      commands.close();
      await hostCredentials?.close();
      await owned?.close();
    },
  };
}

const seconds = (max: number) =>
  z
    .string()
    .regex(/^\d{1,6}$/, `must be a whole number of seconds from 1 to ${max}`)
    .transform(Number)
    .refine(
      (value) => value >= 1 && value <= max,
      `must be a whole number of seconds from 1 to ${max}`,
    );

const envSchema = z.object({
  GPUSHARDS_NATS_URL: z
    .string()
    .regex(
      /^(nats|tls|wss?):\/\/[^\s,]+(,(nats|tls|wss?):\/\/[^\s,]+)*$/,
      'must be one or more nats://host:port URLs separated by commas',
    )
    .optional(),
  GPUSHARDS_NATS_USER: z.string().optional(),
  GPUSHARDS_NATS_PASSWORD: z.string().optional(),
  GPUSHARDS_NATS_NKEY_SEED_FILE: z.string().optional(),
  GPUSHARDS_NATS_CREDS: z.string().optional(),
  GPUSHARDS_NATS_REVOCATION_FILE: z.string().optional(),
  GPUSHARDS_NATS_COMMAND_TIMEOUT_SECONDS: seconds(300).optional(),
  GPUSHARDS_NATS_COMMAND_ATTEMPTS: z
    .string()
    .regex(/^([1-9]|10)$/, 'must be a whole number from 1 to 10')
    .transform(Number)
    .optional(),
});

/** Variables that hold secrets: never echoed in an error. */
const SECRET = new Set(['GPUSHARDS_NATS_PASSWORD']);

/**
 * The NATS link from GPUSHARDS_NATS_* variables, or undefined when GPUSHARDS_NATS_URL is
 * unset (the control plane then runs without NATS). Empty variables count as unset. Throws
 * ConfigError naming every bad variable; the password is never echoed.
 *   GPUSHARDS_NATS_URL                      nats://host:port[,nats://host:port...]
 *   GPUSHARDS_NATS_NKEY_SEED_FILE           the control-plane user's seed (generate-config.mjs)
 *   GPUSHARDS_NATS_USER, _PASSWORD          or a user and password (both)
 *   GPUSHARDS_NATS_CREDS                    or a .creds file (JWT deployments)
 *   GPUSHARDS_NATS_REVOCATION_FILE          JWT deployments: removeHost revokes the host's user
 *   GPUSHARDS_NATS_COMMAND_TIMEOUT_SECONDS  wait for an agent's reply per attempt (10)
 *   GPUSHARDS_NATS_COMMAND_ATTEMPTS         attempts per command, same command id (3)
 */
export function agentLinkFromEnv(
  env: NodeJS.ProcessEnv = process.env,
  cwd: string = process.cwd(),
): AgentLinkOptions | undefined {
  const { present, values: vars, problems } = readEnvVariables(envSchema, env, { secret: SECRET });
  if (vars === undefined) {
    throw new ConfigError(`invalid configuration:\n  ${problems.join('\n  ')}`);
  }
  const auth = readNatsAuth(vars, (path) => resolve(cwd, path), problems);
  if (vars.GPUSHARDS_NATS_URL === undefined) {
    const stray = Object.keys(present);
    if (stray.length > 0) {
      problems.push(`${stray.join(', ')} set without GPUSHARDS_NATS_URL: set it, or unset them`);
    }
  }
  if (problems.length > 0)
    throw new ConfigError(`invalid configuration:\n  ${problems.join('\n  ')}`);
  if (vars.GPUSHARDS_NATS_URL === undefined) return undefined;
  const commands: CommandDeliveryOptions = {
    timeoutMs:
      (vars.GPUSHARDS_NATS_COMMAND_TIMEOUT_SECONDS ?? DEFAULT_COMMAND_DELIVERY.timeoutMs / 1000) *
      1000,
    attempts: vars.GPUSHARDS_NATS_COMMAND_ATTEMPTS ?? DEFAULT_COMMAND_DELIVERY.attempts,
  };
  return {
    nats: {
      servers: vars.GPUSHARDS_NATS_URL.split(','),
      ...(auth ? { auth } : {}),
      ...(vars.GPUSHARDS_NATS_REVOCATION_FILE === undefined
        ? {}
        : { revocationFile: resolve(cwd, vars.GPUSHARDS_NATS_REVOCATION_FILE) }),
    },
    commands,
  };
}
