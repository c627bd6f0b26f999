/**
 * What the control plane sends an agent: the commands (launch, stop, delete, resize, reconcile)
 * on gpushards.host.<hostId>.cmd, what a successful one did, the error codes a failed one may
 * carry, and the reply. Separate from agent-messages.ts, the other direction; the launch spec a
 * launch carries is in shard-spec.ts.
 */
import { z } from 'zod';

import {
  commandIdSchema,
  containerIdSchema,
  envelope,
  errorSchema,
  shardIdSchema,
} from './primitives.js';
import {
  computeShareSchema,
  gpuLimitsSchema,
  memoryResidencySchema,
  shardLaunchSpecSchema,
  shardStateSchema,
} from './shard-spec.js';

// Objects are z.object: unknown fields are tolerated and dropped, so a newer peer may add
// optional fields without breaking an older one. Unknown enum values and command types
// are refused. See README.md, "Versioning".

// ---------------------------------------------------------------------------------------
// commands: control plane -> agent, request/reply on gpushards.host.<hostId>.cmd.

const commandHeader = { ...envelope, commandId: commandIdSchema };

export const launchCommandSchema = z.object({
  ...commandHeader,
  type: z.literal('launch'),
  shard: shardLaunchSpecSchema,
});
export const stopCommandSchema = z.object({
  ...commandHeader,
  type: z.literal('stop'),
  shardId: shardIdSchema,
  /** Seconds between SIGTERM and SIGKILL. */
  graceSeconds: z.int().min(0).max(600),
});
export const deleteCommandSchema = z.object({
  ...commandHeader,
  type: z.literal('delete'),
  shardId: shardIdSchema,
});
export const resizeCommandSchema = z.object({
  ...commandHeader,
  type: z.literal('resize'),
  shardId: shardIdSchema,
  /** The new caps, one per GPU of the shard. */
  gpus: gpuLimitsSchema,
  /** A new compute share on every GPU of the shard; absent = unchanged. */
  compute: computeShareSchema.optional(),
});

/**
 * Elastic memory (docs/elastic.md): move the GPU memory of every CUDA process of the shard's
 * container to host RAM (lock all, then checkpoint all) and mark its limits file suspended, or
 * back (restore all, then unlock all, then mark it resident). Answered once taken on; the end
 * arrives as a SUSPENDED / SUSPEND_FAILED or RESUMED / RESUME_FAILED state event. Idempotent:
 * a repeat while the move runs joins it; one for memory already there answers at once.
 *
 * Ordered by `shardVersion`: a command the control plane retried while the agent was away can
 * arrive after a later move of the same shard was taken on (a suspend retried past the resume
 * that a wake asked for), and would undo it; the agent refuses a move older than the newest it
 * took on for that shard (STALE_COMMAND).
 */
/**
 * The shard's version in the control plane's database once it decided the move (it grows with
 * every state change). Absent from an older control plane: such a move is not ordered.
 */
const shardVersionSchema = z.number().int().nonnegative().max(Number.MAX_SAFE_INTEGER);

export const SUSPEND_CAUSE_VALUES = [
  'suspend-requested',
  'idle-suspend',
  'make-room',
  'reclaim',
] as const;
export const suspendCommandSchema = z.object({
  ...commandHeader,
  type: z.literal('suspend'),
  shardId: shardIdSchema,
  /** Who asked (libs/limits SUSPEND_CAUSES): for the agent's metrics and logs. */
  cause: z.enum(SUSPEND_CAUSE_VALUES),
  shardVersion: shardVersionSchema.optional(),
});
export const resumeCommandSchema = z.object({
  ...commandHeader,
  type: z.literal('resume'),
  shardId: shardIdSchema,
  shardVersion: shardVersionSchema.optional(),
});

/**
 * Reconcile now instead of at the next period: a control plane that starts asks each agent,
 * since state events published while no control plane listened went to no one. An agent
 * older than this command refuses it (INVALID_COMMAND); its next period does the same.
 */
export const reconcileCommandSchema = z.object({
  ...commandHeader,
  type: z.literal('reconcile'),
});

export const COMMAND_TYPES = [
  'launch',
  'stop',
  'delete',
  'resize',
  'reconcile',
  'suspend',
  'resume',
] as const;
export type CommandType = (typeof COMMAND_TYPES)[number];

export const commandSchema = z
  .discriminatedUnion(
    'type',
    [
      launchCommandSchema,
      stopCommandSchema,
      deleteCommandSchema,
      resizeCommandSchema,
      reconcileCommandSchema,
      suspendCommandSchema,
      resumeCommandSchema,
    ],
    {
      error: (issue) =>
        issue.code === 'invalid_union'
          ? `unknown command type ${JSON.stringify(readType(issue.input))}: expected one of ${COMMAND_TYPES.join(', ')}`
          : undefined,
    },
  )
  .describe('command');
export type Command = z.infer<typeof commandSchema>;
export type LaunchCommand = z.infer<typeof launchCommandSchema>;
export type StopCommand = z.infer<typeof stopCommandSchema>;
export type DeleteCommand = z.infer<typeof deleteCommandSchema>;
export type ResizeCommand = z.infer<typeof resizeCommandSchema>;
export type ReconcileCommand = z.infer<typeof reconcileCommandSchema>;
export type SuspendCommand = z.infer<typeof suspendCommandSchema>;
export type ResumeCommand = z.infer<typeof resumeCommandSchema>;

function readType(input: unknown): unknown {
  return typeof input === 'object' && input !== null ? (input as { type?: unknown }).type : input;
}

/**
 * What a successful command did. A launch replies once the agent has taken it on (the
 * image pull may take minutes); how it ends arrives as state events.
 */
export const commandResultSchema = z.discriminatedUnion('type', [
  z.object({
    type: z.literal('launch'),
    state: shardStateSchema,
    containerId: containerIdSchema.optional(),
  }),
  z.object({ type: z.literal('stop'), wasRunning: z.boolean() }),
  z.object({ type: z.literal('delete'), removed: z.boolean() }),
  z.object({ type: z.literal('resize'), gpus: gpuLimitsSchema }),
  /** Taken on: the reconcile runs after the reply, as the periodic one does. */
  z.object({ type: z.literal('reconcile') }),
  /** Taken on; `memory` is where the shard's memory was when the agent took it. */
  z.object({ type: z.literal('suspend'), memory: memoryResidencySchema }),
  z.object({ type: z.literal('resume'), memory: memoryResidencySchema }),
]);
export type CommandResult = z.infer<typeof commandResultSchema>;

/** Codes a failed command may carry; receivers treat unknown codes as failures too. */
export const COMMAND_ERROR_CODES = {
  /** The command could not be decoded (then `commandId` is null if it could not be read). */
  INVALID_COMMAND: 'INVALID_COMMAND',
  UNSUPPORTED_VERSION: 'UNSUPPORTED_VERSION',
  /** The command's hostId is not this agent's. */
  WRONG_HOST: 'WRONG_HOST',
  UNKNOWN_SHARD: 'UNKNOWN_SHARD',
  UNKNOWN_GPU: 'UNKNOWN_GPU',
  /** A resize would set a cap below what the shard already uses. */
  BELOW_USAGE: 'BELOW_USAGE',
  /** Docker refused or failed. */
  RUNTIME_ERROR: 'RUNTIME_ERROR',
  /**
   * A suspend or resume this host cannot do: no checkpoint API in its driver, suspends turned
   * off, the host RAM budget for suspended shards exhausted, or the container not running.
   */
  NOT_SUSPENDABLE: 'NOT_SUSPENDABLE',
  /** A suspend or resume older (by shardVersion) than one the agent already took on. */
  STALE_COMMAND: 'STALE_COMMAND',
  INTERNAL: 'INTERNAL',
} as const;

export const commandReplySchema = z
  .discriminatedUnion('ok', [
    z.object({ ...commandHeader, ok: z.literal(true), result: commandResultSchema }),
    z.object({
      ...envelope,
      /** null when the command was too malformed to read its id. */
      commandId: commandIdSchema.nullable(),
      ok: z.literal(false),
      error: errorSchema,
    }),
  ])
  .describe('command reply');
export type CommandReply = z.infer<typeof commandReplySchema>;
