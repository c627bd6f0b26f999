// The `usage` query over a month of samples, through HTTP GraphQL. See bench/README.md.
// Run after `npx nx run control-plane:build`:
//   node bench/usage-accounting.mjs [postgres|pglite] [flat|changing] [shards]
import { randomUUID } from 'node:crypto';
import { startApiTestHarness } from '../apps/control-plane/dist/testing/api-test-harness.js';
import { startPostgres } from '../apps/control-plane/dist/testing/index.js';
import { benchOptions } from './options.mjs';

const {
  kind,
  pattern,
  shards: shardCountText,
} = benchOptions(import.meta.url, {
  positionals: [
    { name: 'kind', default: 'postgres', choices: ['postgres', 'pglite'], help: 'the database' },
    {
      name: 'pattern',
      default: 'flat',
      choices: ['flat', 'changing'],
      help: 'the samples: one value all month, or changing',
    },
    { name: 'shards', default: '8', value: 'count', help: 'shards sampled' },
  ],
  options: {},
  example: 'flock /tmp/bench.lock node bench/usage-accounting.mjs pglite changing 8',
});
const shardCount = Number(shardCountText);
const DAY = 86_400_000;

const server = kind === 'postgres' ? await startPostgres() : undefined;
const h = await startApiTestHarness(kind, server ? { server } : {});
try {
  const team = (await h.prisma.team.create({ data: { name: 'bench' } })).id;
  await h.prisma.host.create({ data: { id: 'bench-host', name: 'bench-host' } });
  const to = new Date(Math.floor(Date.now() / DAY) * DAY);
  const from = new Date(to.getTime() - 31 * DAY);
  const shards = [];
  const gpus = [];
  for (let i = 0; i < shardCount; i++) {
    const gpuUuid = `GPU-bench-${i}`;
    await h.prisma.gpu.create({
      data: {
        uuid: gpuUuid,
        hostId: 'bench-host',
        index: i,
        model: 'bench',
        totalBytes: 80n << 30n,
      },
    });
    const id = randomUUID();
    await h.prisma.shard.create({
      data: {
        id,
        teamId: team,
        name: `shard-${i}`,
        image: 'bench',
        bytesPerGpu: 1n << 30n,
        limitBytesPerGpu: 1n << 30n,
        gpuCount: 1,
        hostId: 'bench-host',
        state: 'RUNNING',
      },
    });
    await h.prisma.shardGpu.create({
      data: { shardId: id, gpuUuid, reservedBytes: 1n << 30n, reservedAt: from },
    });
    shards.push(id);
    gpus.push(gpuUuid);
  }
  // One sample every 10 s per shard; 'changing' gives every sample a new value (worst case).
  const used =
    pattern === 'flat' ? '1000000' : '(extract(epoch FROM t)::bigint % 1000 + 1) * 1000000';
  await h.prisma.$executeRawUnsafe(
    `INSERT INTO usage_sample (shard_id, gpu_uuid, at, used_bytes)
     SELECT held.shard_id::uuid, held.gpu_uuid, t, ${used}
       FROM unnest($1::text[], $2::text[]) AS held (shard_id, gpu_uuid),
            generate_series($3::timestamptz, $4::timestamptz - interval '1 ms', interval '10 seconds') t`,
    shards,
    gpus,
    from,
    to,
  );
  const samples = await h.prisma.usageSample.count();
  const query = `query ($teamId: ID!, $from: String!, $to: String!) {
    usage(teamId: $teamId, from: $from, to: $to) { reservedGibHours usedGibHours peakUsed { human } shardCount } }`;
  const times = [];
  let answer;
  for (let run = 0; run < 3; run++) {
    const started = process.hrtime.bigint();
    answer = await h.graphql(query, {
      teamId: team,
      from: from.toISOString(),
      to: to.toISOString(),
    });
    times.push(Number(process.hrtime.bigint() - started) / 1e6);
  }
  if (answer.errors) throw new Error(JSON.stringify(answer.errors));
  console.log(
    JSON.stringify({
      kind,
      pattern,
      shards: shardCount,
      samples,
      ms: times.map(Math.round),
      rssMiB: Math.round(process.memoryUsage().rss / 2 ** 20),
      usage: answer.data.usage,
    }),
  );
} finally {
  await h.close();
  await server?.stop();
}
