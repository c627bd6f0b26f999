import type { AdmissionPlan, PendingShard, WaitReason } from '@gpushards/limits';

/** What the last pass of this process decided for a shard that still waits. */
export interface QueueEntry {
  readonly shardId: string;
  readonly teamId: string;
  readonly position: number;
  readonly reason: string;
  readonly reasonKind: WaitReason['kind'];
  /** The shard it waits behind, for 'behind'. */
  readonly behind: string | null;
  /** Where it is expected to go, when it keeps a spot. */
  readonly spotHostId: string | null;
  /** When it is expected to start (an estimate, see StartEstimates); null when none is given. */
  readonly estimatedStart: Date | null;
}

/** A pass's waiting shards as the API shows them, by shard id, in queue order. */
export function queueEntries(
  waiting: AdmissionPlan['waiting'],
  pending: readonly PendingShard[],
  /** Estimated starts (ms since the epoch) by shard id; absent: none. */
  starts: ReadonlyMap<string, number>,
): Map<string, QueueEntry> {
  const entries = new Map<string, QueueEntry>();
  const teamOf = new Map(pending.map((shard) => [shard.id, shard.teamId]));
  waiting.forEach((wait, index) => {
    const start = starts.get(wait.shardId);
    entries.set(wait.shardId, {
      shardId: wait.shardId,
      teamId: teamOf.get(wait.shardId) ?? '',
      position: index + 1,
      reason: describeWait(wait.reason),
      reasonKind: wait.reason.kind,
      behind:
        wait.reason.kind === 'behind' || wait.reason.kind === 'reclaimed'
          ? wait.reason.shardId
          : null,
      spotHostId: wait.spot?.hostId ?? null,
      estimatedStart: start === undefined ? null : new Date(start),
    });
  });
  return entries;
}

export function describeWait(reason: WaitReason): string {
  switch (reason.kind) {
    case 'capacity':
      return 'no host has room for it now; it runs as soon as one frees enough';
    case 'behind':
      return `the room it fits is kept for shard ${reason.shardId}, ahead of it in the queue`;
    case 'quota':
      return `its team's limit: ${reason.message}`;
    case 'guarantee':
      return reason.message;
    case 'reclaimed':
      return `it was stopped to make room for shard ${reason.shardId}, and waits until that one is placed`;
    case 'reclaiming':
      return reason.victimIds.length > 0
        ? `borrowed shards are being stopped for it: ${reason.victimIds.join(', ')}`
        : 'borrowed shards are being stopped for it';
    case 'suspending':
      return reason.victimIds.length > 0
        ? `idle elastic shards are being suspended to make room for it: ${reason.victimIds.join(', ')}`
        : 'idle elastic shards are being suspended to make room for it';
  }
}
