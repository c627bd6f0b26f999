/**
 * A shard event's notice (cap violation, ungoverned compute, idle) as JSON: what a NOTIFY to the
 * other replicas carries (shard-event-relay.ts) and what the shard_event table keeps in `details`
 * (shard-event-store.ts). Validated on the way back in, so a malformed payload or row is refused,
 * not trusted.
 */
import { z } from 'zod';
import { IdleActionKind } from '../compute/idle.model.js';
import type { CapPolicy } from '../database/index.js';
import type { CapViolation } from '../fence/cap-policy.model.js';
import type { UngovernedCompute } from '../fence/ungoverned-compute.model.js';
import { sizeOf } from '../graphql/size.model.js';
import type { ShardStateChange } from './shard-event-bus.js';

export const relayedViolationSchema = z.object({
  gpuUuid: z.string().max(64),
  realBytes: z.number().int().min(0),
  capBytes: z.number().int().min(0),
  toleranceBytes: z.number().int().min(0),
  action: z.enum(['KILL', 'STOP', 'REPORT']),
  pid: z.number().int(),
  processBytes: z.number().int().min(0),
  killedPids: z.array(z.number().int()).max(64),
  error: z.string().max(512).nullable(),
});

export const relayedUngovernedSchema = z.object({
  gpuUuid: z.string().max(64),
  action: z.enum(['KILL', 'STOP', 'REPORT']),
  pid: z.number().int(),
  smPercent: z.number().min(0).max(100),
  pids: z.array(z.number().int()).max(64),
  busyPercent: z.number().min(0).max(100),
  samples: z.number().int().min(0),
  busySamples: z.number().int().min(0),
  thresholdPercent: z.number().min(0).max(100),
  windowSeconds: z.number().min(0),
  lastKernelAt: z.iso.datetime().nullable(),
  killedPids: z.array(z.number().int()).max(64),
  error: z.string().max(512).nullable(),
  message: z.string().max(512),
});

export const relayedIdleSchema = z.object({
  action: z.enum(['REPORT', 'STOP', 'SUSPEND']),
  idleSince: z.iso.datetime(),
  idleSeconds: z.number().min(0),
});

/** The notices of one change, each optional (none: a plain state change). */
export const relayedNoticesSchema = z.object({
  violation: relayedViolationSchema.optional(),
  ungovernedCompute: relayedUngovernedSchema.optional(),
  idle: relayedIdleSchema.optional(),
});

export type RelayedNotices = z.infer<typeof relayedNoticesSchema>;
type RelayedViolation = z.infer<typeof relayedViolationSchema>;
type RelayedUngoverned = z.infer<typeof relayedUngovernedSchema>;

/** The notices of `change` as JSON ({} for a plain state change). */
export function noticesOf(
  change: Pick<ShardStateChange, 'violation' | 'ungovernedCompute' | 'idle'>,
): RelayedNotices {
  return {
    ...(change.violation ? { violation: relayedViolationOf(change.violation) } : {}),
    ...(change.ungovernedCompute
      ? { ungovernedCompute: relayedUngovernedOf(change.ungovernedCompute) }
      : {}),
    ...(change.idle
      ? {
          idle: {
            action: change.idle.action,
            idleSince: change.idle.idleSince.toISOString(),
            idleSeconds: change.idle.idleSeconds,
          },
        }
      : {}),
  };
}

/** noticesOf's JSON back as the change's fields. */
export function noticesFrom(
  relayed: RelayedNotices,
): Pick<ShardStateChange, 'violation' | 'ungovernedCompute' | 'idle'> {
  return {
    ...(relayed.violation ? { violation: violationOf(relayed.violation) } : {}),
    ...(relayed.ungovernedCompute
      ? { ungovernedCompute: ungovernedOf(relayed.ungovernedCompute) }
      : {}),
    ...(relayed.idle
      ? {
          idle: {
            action: relayed.idle.action as IdleActionKind,
            idleSince: new Date(relayed.idle.idleSince),
            idleSeconds: relayed.idle.idleSeconds,
          },
        }
      : {}),
  };
}

/** The event's kind, as ShardEvent.kind names it (ShardEventKind). */
export function kindOf(
  change: Pick<ShardStateChange, 'violation' | 'ungovernedCompute' | 'idle'>,
): 'STATE' | 'VIOLATION' | 'UNGOVERNED_COMPUTE' | 'IDLE' | 'IDLE_STOP' | 'IDLE_SUSPEND' {
  if (change.violation) return 'VIOLATION';
  if (change.ungovernedCompute) return 'UNGOVERNED_COMPUTE';
  if (change.idle) {
    switch (change.idle.action) {
      case IdleActionKind.REPORT:
        return 'IDLE';
      case IdleActionKind.STOP:
        return 'IDLE_STOP';
      case IdleActionKind.SUSPEND:
        return 'IDLE_SUSPEND';
    }
  }
  return 'STATE';
}

function relayedViolationOf(violation: CapViolation): RelayedViolation {
  return {
    gpuUuid: violation.gpuUuid,
    realBytes: violation.real.bytes,
    capBytes: violation.cap.bytes,
    toleranceBytes: violation.tolerance.bytes,
    action: violation.action,
    pid: violation.pid,
    processBytes: violation.processMemory.bytes,
    // A NOTIFY payload and a stored row are small: the first processes killed are enough.
    killedPids: violation.killedPids.slice(0, 64),
    error: violation.error?.slice(0, 512) ?? null,
  };
}

function violationOf(relayed: RelayedViolation): CapViolation {
  return {
    gpuUuid: relayed.gpuUuid,
    real: sizeOf(relayed.realBytes),
    cap: sizeOf(relayed.capBytes),
    tolerance: sizeOf(relayed.toleranceBytes),
    action: relayed.action as CapPolicy,
    pid: relayed.pid,
    processMemory: sizeOf(relayed.processBytes),
    killedPids: relayed.killedPids,
    error: relayed.error,
  };
}

function relayedUngovernedOf(finding: UngovernedCompute): RelayedUngoverned {
  return {
    ...finding,
    // A NOTIFY payload and a stored row are small: the first processes are enough.
    pids: finding.pids.slice(0, 64),
    killedPids: finding.killedPids.slice(0, 64),
    lastKernelAt: finding.lastKernelAt?.toISOString() ?? null,
    error: finding.error?.slice(0, 512) ?? null,
    message: finding.message.slice(0, 512),
  };
}

function ungovernedOf(relayed: RelayedUngoverned): UngovernedCompute {
  return {
    ...relayed,
    action: relayed.action as CapPolicy,
    lastKernelAt: relayed.lastKernelAt === null ? null : new Date(relayed.lastKernelAt),
  };
}
