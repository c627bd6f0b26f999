import { IdleShardsDocument, type ResultOf } from '@gpushards/graphql-client';
import { age, bytesOf, humanBytes } from '../../logic/format.js';
import { busyRatio, shareLabel } from '../../logic/compute.js';
import { Empty, ErrorBox, Loading, Section } from '../../ui.js';

type IdleResult = {
  data?: ResultOf<typeof IdleShardsDocument>;
  fetching: boolean;
  error?: unknown;
};

/**
 * What holds GPU memory and computes nothing: the shards their team's idle policy reports idle
 * (shards(idle: true)); the Fleet page reads it again on every shard event (IDLE among them).
 */
export function IdleShards({ result }: { result: IdleResult }) {
  const rows = result.data?.shards.edges.map((e) => e.node) ?? [];
  return (
    <Section title="Idle shards">
      {result.fetching && !result.data && <Loading what="idle shards" />}
      <ErrorBox error={result.error as never} />
      {result.data && rows.length === 0 && (
        <Empty>
          No shard is reported idle. Only teams with an idle policy (Teams) are watched, on hosts
          that report compute activity.
        </Empty>
      )}
      {rows.length > 0 && (
        <table className="idle">
          <thead>
            <tr>
              <th scope="col">team / shard</th>
              <th scope="col">host</th>
              <th scope="col">idle for</th>
              <th scope="col">holds</th>
              <th scope="col">compute</th>
              <th scope="col">busy</th>
            </tr>
          </thead>
          <tbody>
            {rows.map((s) => {
              const live = s.gpus.filter((g) => g.releasedAt === null);
              const held = live.reduce((n, g) => n + bytesOf(g.reserved.bytes), 0);
              const busy = busyRatio(s.gpus);
              return (
                <tr key={s.id} data-idle-shard={s.name} data-team={s.team.name}>
                  <td>
                    {s.team.name}/{s.name}
                  </td>
                  <td>{s.hostId ?? '—'}</td>
                  <td title={s.idleSince ?? undefined}>{age(s.idleSince)}</td>
                  <td>
                    {humanBytes(held)} on {live.length} GPU(s)
                  </td>
                  <td>{shareLabel(s.computeSharePercent, s.computeMode)}</td>
                  <td>{busy === null ? '—' : `${Math.round(busy * 100)}%`}</td>
                </tr>
              );
            })}
          </tbody>
        </table>
      )}
    </Section>
  );
}
