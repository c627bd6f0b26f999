import { useQuery, useSubscription } from 'urql';
import { formatDuration } from '@gpushards/limits';
import { ShardEventsDocument, TeamComputeDocument, TeamDocument } from '@gpushards/graphql-client';
import { bytesOf } from '../../logic/format.js';
import { teamCompute } from '../../logic/compute.js';
import { Empty, ErrorBox, Gauge, Loading, Section } from '../../ui.js';

export function Quota({ teamId }: { teamId: string }) {
  const [result, refetchQuota] = useQuery({ query: TeamDocument, variables: { id: teamId } });
  const [compute, refetchCompute] = useQuery({
    query: TeamComputeDocument,
    variables: { teamId, first: 200 },
  });
  // What the team holds changes with its shards: read again on each of its shard events.
  useSubscription({ query: ShardEventsDocument, variables: { teamId } }, (n: number = 0) => {
    refetchQuota({ requestPolicy: 'network-only' });
    refetchCompute({ requestPolicy: 'network-only' });
    return n + 1;
  });
  const team = result.data?.team;
  const policy = team?.quotaPolicy;
  const held = compute.data ? teamCompute(compute.data.shards.edges.map((e) => e.node)) : undefined;
  return (
    <Section title="Quota">
      {result.fetching && !team && <Loading what="the quota" />}
      <ErrorBox error={result.error ?? compute.error} />
      {team && !policy && (
        <Empty>No quota policy yet: this team cannot place shards until an admin sets one.</Empty>
      )}
      {team && policy && (
        <div className="gauges">
          <Gauge
            label="Memory"
            used={bytesOf(team.usage.reserved.bytes)}
            limit={bytesOf(policy.maxTotal.bytes)}
            text={`${team.usage.reserved.human} of ${policy.maxTotal.human}`}
          />
          <Gauge
            label="Shards"
            used={team.usage.shardCount}
            limit={policy.maxShards}
            text={`${team.usage.shardCount} of ${policy.maxShards}`}
          />
          {held && (
            <Gauge
              label="Compute"
              hint="How many GPUs' worth of time the compute shares of the team's live shards guarantee, of the GPUs they hold; the rest of those GPUs' time is shared"
              used={held.guaranteedGpus}
              limit={held.gpusHeld}
              text={
                held.gpusHeld === 0
                  ? 'no GPU held'
                  : `${held.guaranteedGpus} of ${held.gpusHeld} GPU(s) guaranteed`
              }
            />
          )}
          {bytesOf(team.share.guarantee.bytes) > 0 && (
            <Gauge
              label="Guaranteed"
              used={Math.min(
                bytesOf(team.usage.reserved.bytes),
                bytesOf(team.share.guarantee.bytes),
              )}
              limit={bytesOf(team.share.guarantee.bytes)}
              text={`${team.share.guarantee.human} guaranteed, ${team.share.borrowed.human} borrowed above it`}
            />
          )}
          <p className="muted" data-testid="quota-terms">
            {team.share.pending > 0 && `${team.share.pending} shard(s) waiting (PENDING). `}
            At most {policy.maxPerShard.human} per shard
            {policy.maxGpusPerShard !== null && `, ${policy.maxGpusPerShard} GPU(s) per shard`}
            {policy.allowedGpuModels.length > 0 &&
              `, models: ${policy.allowedGpuModels.join(', ')}`}
            {policy.maxComputeSharePercent === 0
              ? ', no compute shares (the default split only)'
              : `, compute share up to ${policy.maxComputeSharePercent ?? 100}% per GPU`}
            ; priority {policy.priority}.{' '}
            {policy.allowElastic
              ? 'Shards may be elastic (their GPU memory waits in host RAM while idle). '
              : ''}
            {team.idlePolicy
              ? `Idle shards (no kernel) are reported after ${formatDuration(team.idlePolicy.idleAfterSeconds)}${
                  team.idlePolicy.stopAfterSeconds === null
                    ? ''
                    : ` and stopped after ${formatDuration(team.idlePolicy.stopAfterSeconds)}`
                }${
                  team.idlePolicy.suspendAfterSeconds === null
                    ? ''
                    : `; elastic ones are suspended to host RAM after ${formatDuration(team.idlePolicy.suspendAfterSeconds)}`
                }.`
              : 'No idle policy.'}
          </p>
        </div>
      )}
    </Section>
  );
}
