import { useQuery } from 'urql';
import { TeamQuotaQuery } from '../../queries.js';
import { bytesOf } from '../../logic/format.js';
import { Empty, ErrorBox, Gauge, Loading, Section } from '../../ui.js';

export function Quota({ teamId }: { teamId: string }) {
  const [result] = useQuery({ query: TeamQuotaQuery, variables: { id: teamId } });
  const team = result.data?.team;
  return (
    <Section title="Quota">
      {result.fetching && !team && <Loading what="the quota" />}
      <ErrorBox error={result.error} />
      {team && !team.quotaPolicy && (
        <Empty>No quota policy yet: this team cannot place shards until an admin sets one.</Empty>
      )}
      {team?.quotaPolicy && (
        <div className="gauges">
          <Gauge
            label="Memory"
            used={bytesOf(team.usage.reserved.bytes)}
            limit={bytesOf(team.quotaPolicy.maxTotal.bytes)}
            text={`${team.usage.reserved.human} of ${team.quotaPolicy.maxTotal.human}`}
          />
          <Gauge
            label="Shards"
            used={team.usage.shardCount}
            limit={team.quotaPolicy.maxShards}
            text={`${team.usage.shardCount} of ${team.quotaPolicy.maxShards}`}
          />
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
          <p className="muted">
            {team.share.pending > 0 && `${team.share.pending} shard(s) waiting (PENDING). `}
            At most {team.quotaPolicy.maxPerShard.human} per shard
            {team.quotaPolicy.maxGpusPerShard !== null &&
              `, ${team.quotaPolicy.maxGpusPerShard} GPU(s) per shard`}
            {team.quotaPolicy.allowedGpuModels.length > 0 &&
              `, models: ${team.quotaPolicy.allowedGpuModels.join(', ')}`}
            ; priority {team.quotaPolicy.priority}.
          </p>
        </div>
      )}
    </Section>
  );
}
