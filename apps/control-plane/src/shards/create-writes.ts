/**
 * The writes of a decided createShard batch inside its transaction: the conditional write of
 * the placed shards, where calls whose GPUs' room another control plane took first are placed
 * again on the GPUs as that write found them, and the PENDING rows
 * of the calls that queue. The statements themselves are in create-statements.ts; this file is
 * the loop around them and what each call's verdict becomes, apart from the batching that
 * answers the calls (`ShardCreator`).
 */
import { randomUUID } from 'node:crypto';
import { performance } from 'node:perf_hooks';
import type { RawSql } from '../database/index.js';
import type { GpuCounts } from '../placement/cached-gpu.js';
import type { CachedFleetPlacer } from './cached-fleet-placer.js';
import type { Pending, Plan, Verdict } from './create-call.js';
import { computeAddedBy, writeBatch, writePending } from './create-statements.js';
import { launchSpecOf } from './launch-spec.js';
import type { CommitEffects } from './shard-lifecycle.js';

/**
 * Writes in one batch: shards left out (another control plane took their GPUs' room first)
 * are placed again on the GPUs as the statement found them, and written again.
 */
const MAX_WRITES = 8;

/**
 * Writes the planned shards. Those left out (their GPUs' room taken by another control plane
 * first) are placed again on the GPUs as the statement found them under its locks (their hosts
 * read again where a host was no longer ONLINE or a GPU went missing), up to MAX_WRITES times
 * in all. Returns whether any call lost a race (its team's usage and the cache counted it
 * meanwhile).
 */
export async function writePlanned(
  tx: RawSql,
  plans: Map<Pending, Plan>,
  verdicts: Map<Pending, Verdict>,
  effects: CommitEffects,
  placer: CachedFleetPlacer,
): Promise<boolean> {
  /** What this transaction added to each GPU's reserved bytes (and compute shares) so far. */
  const added = new Map<string, GpuCounts>();
  let toWrite = [...plans.keys()];
  let lostRaces = false;
  for (let writes = 1; toWrite.length > 0; writes++) {
    const startedAt = performance.now();
    const written = await writeBatch(
      tx,
      toWrite.map((pending) => plans.get(pending)!.shard),
    );
    // The latest counts of the batch's GPUs, whether or not anything was left out: the next
    // batches place on them instead of on the last periodic read.
    placer.foundGpus(written.gpus, added, startedAt);
    const losers: Pending[] = [];
    for (const pending of toWrite) {
      const { placed, shardId } = plans.get(pending)!.shard;
      const write = written.shards.get(shardId);
      if (write === undefined) {
        losers.push(pending);
        continue;
      }
      const { permille, isolated } = computeAddedBy(pending.request);
      const { shard, eventId } = write;
      verdicts.set(pending, { kind: 'placed', shard });
      for (const uuid of placed.gpuUuids) {
        const sum = added.get(uuid) ?? { bytes: 0, permille: 0, isolated: 0 };
        sum.bytes += placed.reservedBytesPerGpu;
        sum.permille += permille;
        sum.isolated += isolated;
        added.set(uuid, sum);
      }
      effects.changes.push({
        shard,
        previousState: null,
        state: 'PLACED',
        at: shard.createdAt,
        eventId,
      });
      const spec = launchSpecOf(shard, placed.gpuUuids);
      effects.command({ shardId, hostId: placed.hostId, command: 'launch' }, (commands) =>
        commands.launch(placed.hostId, spec),
      );
    }
    if (losers.length === 0) break;
    lostRaces = true;
    const again = losers.map((pending) => ({ pending, plan: plans.get(pending)! }));
    for (const { pending, plan } of again) {
      plan.holds.settle(false);
      plans.delete(pending);
    }
    if (writes === MAX_WRITES) {
      for (const { pending, plan } of again) {
        verdicts.set(pending, { kind: 'lost-race', hostId: plan.shard.placed.hostId });
      }
      break;
    }
    const lostHosts = new Set<string>(again.map(({ plan }) => plan.shard.placed.hostId));
    await placer.reloadHosts(
      tx,
      written.unschedulableHostIds.filter((hostId) => lostHosts.has(hostId)),
      added,
    );
    toWrite = [];
    for (const { pending, plan } of again) {
      const planned = placer.plan(pending, plan.placementRequest);
      if (planned.kind === 'planned') {
        plans.set(pending, planned);
        toWrite.push(pending);
      } else {
        verdicts.set(pending, planned);
      }
    }
  }
  return lostRaces;
}

/** Writes the calls that wait as PENDING; their verdict becomes the written shard. */
export async function writeQueued(
  tx: RawSql,
  batch: readonly Pending[],
  verdicts: Map<Pending, Verdict>,
  effects: CommitEffects,
): Promise<void> {
  for (const pending of batch) {
    const verdict = verdicts.get(pending);
    if (verdict?.kind !== 'queued') continue;
    const shard = await writePending(
      tx,
      {
        shardId: randomUUID(),
        auditId: randomUUID(),
        caller: pending.caller,
        teamId: pending.teamId,
        request: pending.request,
      },
      verdict.reason,
    );
    effects.changes.push({ shard, previousState: null, state: 'PENDING', at: shard.createdAt });
    verdicts.set(pending, { kind: 'placed', shard });
  }
}
