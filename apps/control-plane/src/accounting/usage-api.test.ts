import assert from 'node:assert/strict';
import { randomUUID } from 'node:crypto';
import { after, before, describe, it } from 'node:test';
import {
  startApiTestHarness,
  type ApiTestHarness,
  type GraphqlResponse,
} from '../testing/api-test-harness.js';
import { startPostgres, TEST_DATABASE_KINDS, type PostgresServer } from '../testing/index.js';

/**
 * `usage` over HTTP GraphQL, on PostgreSQL and on PGlite, from reservations and samples
 * written straight into the database. Every expected number is worked out by hand below.
 */

let postgres: PostgresServer | undefined;
before(async () => {
  postgres = await startPostgres();
});
after(async () => {
  await postgres?.stop();
});

const GiB = 2 ** 30;
const HOUR = 3_600_000;
/** Midnight UTC ten days ago: a fixed grid in the past, inside the 31-day limit. */
const T0 = Math.floor(Date.now() / (24 * HOUR)) * 24 * HOUR - 10 * 24 * HOUR;
const at = (hours: number) => new Date(T0 + hours * HOUR);
const iso = (hours: number) => at(hours).toISOString();

const USAGE = `query ($teamId: ID!, $from: String!, $to: String!, $first: Int, $after: String) {
  usage(teamId: $teamId, from: $from, to: $to) {
    team { id name } from to measuredUntil reservedGibHours usedGibHours shardCount
    peakUsed { bytes human }
    shards(first: $first, after: $after) {
      edges { cursor node { shardId shardName hostId reservedGibHours usedGibHours peakUsed { bytes human } } }
      pageInfo { hasNextPage endCursor }
    }
  }
}`;

interface ShardLine {
  shardId: string;
  shardName: string;
  hostId: string | null;
  reservedGibHours: number;
  usedGibHours: number;
  peakUsed: { bytes: string; human: string };
}
interface Usage {
  usage: {
    team: { id: string; name: string };
    from: string;
    to: string;
    measuredUntil: string;
    reservedGibHours: number;
    usedGibHours: number;
    shardCount: number;
    peakUsed: { bytes: string; human: string };
    shards: {
      edges: { cursor: string; node: ShardLine }[];
      pageInfo: { hasNextPage: boolean; endCursor: string | null };
    };
  };
}

function assertError<T>(response: GraphqlResponse<T>, code: string, context = ''): void {
  assert.equal(
    response.errors?.[0]?.extensions?.code,
    code,
    `${context} ${JSON.stringify(response)}`,
  );
}

function ok<T>(response: GraphqlResponse<T>): T {
  assert.equal(response.errors, undefined, JSON.stringify(response.errors));
  return response.data!;
}

/** Prometheus text → { 'name{a="x",b="y"}': value }, labels in the order written. */
function parseMetrics(text: string): Map<string, number> {
  const series = new Map<string, number>();
  for (const line of text.split('\n')) {
    if (line === '' || line.startsWith('#')) continue;
    const split = line.lastIndexOf(' ');
    series.set(line.slice(0, split), Number(line.slice(split + 1)));
  }
  return series;
}

for (const kind of TEST_DATABASE_KINDS) {
  describe(`usage accounting and fleet metrics on ${kind}`, () => {
    let h: ApiTestHarness;
    const teamA = randomUUID();
    const teamB = randomUUID();
    const teamC = randomUUID();
    const shard = {
      A: randomUUID(),
      B: randomUUID(),
      C: randomUUID(),
      D: randomUUID(),
      R: randomUUID(),
    };

    /**
     * Hosts h1 (ONLINE: g1, g2, 80 GiB H100s) and h2 (CORDONED: g3, a 24 GiB L4).
     * Team acct-a (quota 48 GiB):
     *   A: g1 + g2, 10 GiB cap each, held 0h–3h, now STOPPED.
     *   B: g1, 8 GiB cap (7.5 GiB asked), held from 2h on, RUNNING.
     *   C: g1, held 0h–0.5h, STOPPED: before every window used here.
     * Team acct-b (no quota policy): D on g2, 16 GiB cap (15.5 asked), RUNNING, with samples.
     * Team acct-c: R on g3, resized: a 4 GiB cap over 1h–2h, then 6 GiB over 2h–4h.
     * Samples, in GiB (written shuffled, see below):
     *   A/g1: 0.5h 4, 2h 6, 3.5h 9 (after its release: never counts)
     *   A/g2: 1.5h 2, 2.5h 0
     *   B/g1: 1.75h 3 (before its reservation: counts from 2h), 4h 5, 6h 7 (after the window)
     *   D/g2: 1h 12
     */
    const samples = [
      [shard.A, 'GPU-g1', 0.5, 4],
      [shard.A, 'GPU-g1', 2, 6],
      [shard.A, 'GPU-g1', 3.5, 9],
      [shard.A, 'GPU-g2', 1.5, 2],
      [shard.A, 'GPU-g2', 2.5, 0],
      [shard.B, 'GPU-g1', 1.75, 3],
      [shard.B, 'GPU-g1', 4, 5],
      [shard.B, 'GPU-g1', 6, 7],
      [shard.C, 'GPU-g1', 0, 30],
      [shard.D, 'GPU-g2', 1, 12],
      [shard.R, 'GPU-g3', 1, 1],
      [shard.R, 'GPU-g3', 2.5, 5],
    ] as const;
    const sampleRows = (rows: readonly (readonly [string, string, number, number])[]) =>
      rows.map(([shardId, gpuUuid, hours, gib]) => ({
        shardId,
        gpuUuid,
        at: at(hours),
        usedBytes: BigInt(gib * GiB),
      }));

    let tokenA: string;
    let tokenB: string;

    before(async () => {
      h = await startApiTestHarness(kind, postgres ? { server: postgres } : {});
      const p = h.prisma;
      await p.team.create({ data: { id: teamA, name: 'acct-a' } });
      await p.team.create({ data: { id: teamB, name: 'acct-b' } });
      await p.team.create({ data: { id: teamC, name: 'acct-c' } });
      await p.quotaPolicy.create({
        data: {
          teamId: teamA,
          maxTotalBytes: BigInt(48 * GiB),
          maxShards: 8,
          maxBytesPerShard: BigInt(24 * GiB),
        },
      });
      await p.host.create({ data: { id: 'h1', name: 'box-1', state: 'ONLINE' } });
      await p.host.create({ data: { id: 'h2', name: 'box-2', state: 'CORDONED' } });
      const H100 = 'NVIDIA H100 80GB HBM3';
      await p.gpu.createMany({
        data: [
          {
            uuid: 'GPU-g1',
            hostId: 'h1',
            index: 0,
            model: H100,
            totalBytes: BigInt(80 * GiB),
            reservedBytes: BigInt(8 * GiB),
            usedBytes: BigInt(30 * GiB),
          },
          {
            uuid: 'GPU-g2',
            hostId: 'h1',
            index: 1,
            model: H100,
            totalBytes: BigInt(80 * GiB),
            reservedBytes: BigInt(16 * GiB),
            usedBytes: BigInt(20 * GiB),
          },
          {
            uuid: 'GPU-g3',
            hostId: 'h2',
            index: 0,
            model: 'NVIDIA L4',
            totalBytes: BigInt(24 * GiB),
            usedBytes: BigInt(1 * GiB),
          },
        ],
      });
      const shardRow = (
        id: string,
        teamId: string,
        name: string,
        state: 'RUNNING' | 'STOPPED',
        askedGib: number,
        capGib: number,
        gpuCount: number,
      ) => ({
        id,
        teamId,
        name,
        image: 'pytorch/pytorch:latest',
        state,
        hostId: 'h1',
        bytesPerGpu: BigInt(askedGib * GiB),
        limitBytesPerGpu: BigInt(capGib * GiB),
        gpuCount,
      });
      await p.shard.createMany({
        data: [
          shardRow(shard.A, teamA, 'train-a', 'STOPPED', 9.5, 10, 2),
          shardRow(shard.B, teamA, 'serve-b', 'RUNNING', 7.5, 8, 1),
          shardRow(shard.C, teamA, 'short-c', 'STOPPED', 1.5, 2, 1),
          shardRow(shard.D, teamB, 'other-d', 'RUNNING', 15.5, 16, 1),
          shardRow(shard.R, teamC, 'resized-r', 'STOPPED', 5.5, 6, 1),
        ],
      });
      const held = (
        shardId: string,
        gpuUuid: string,
        capGib: number,
        from: number,
        until: number | null,
        usedGib = 0,
      ) => ({
        shardId,
        gpuUuid,
        reservedBytes: BigInt(capGib * GiB),
        usedBytes: BigInt(usedGib * GiB),
        reservedAt: at(from),
        releasedAt: until === null ? null : at(until),
      });
      await p.shardGpu.createMany({
        data: [
          held(shard.A, 'GPU-g1', 10, 0, 3),
          held(shard.A, 'GPU-g2', 10, 0, 3),
          held(shard.B, 'GPU-g1', 8, 2, null, 5),
          held(shard.C, 'GPU-g1', 2, 0, 0.5),
          held(shard.D, 'GPU-g2', 16, 0, null, 12),
          held(shard.R, 'GPU-g3', 4, 1, 2),
          held(shard.R, 'GPU-g3', 6, 2, 4),
        ],
      });
      // Out of order: newest first, one GPU's readings interleaved with another's.
      await p.usageSample.createMany({ data: sampleRows([...samples].reverse()) });

      const token = async (teamId: string) => {
        const created = ok(
          await h.graphql<{ createApiToken: { secret: string } }>(
            `mutation ($t: ID!) { createApiToken(teamId: $t, role: VIEWER, name: "usage") { secret } }`,
            { t: teamId },
          ),
        );
        return created.createApiToken.secret;
      };
      tokenA = await token(teamA);
      tokenB = await token(teamB);
    });
    after(async () => {
      await h?.close();
    });

    const usage = (variables: Record<string, unknown>, token?: string | null) =>
      h.graphql<Usage>(USAGE, { teamId: teamA, ...variables }, token);

    /**
     * Window [1h, 5h):
     *   A reserved 20 GiB over 1h–3h = 40 GiB-h. Used (g1 + g2):
     *     1h–1.5h 4+0, 1.5h–2h 4+2, 2h–2.5h 6+2, 2.5h–3h 6+0 → ½·(4+6+8+6) = 12 GiB-h, peak 8.
     *   B reserved 8 GiB over 2h–5h (running: up to the window's end) = 24 GiB-h. Used:
     *     2h–4h 3, 4h–5h 5 → 6 + 5 = 11 GiB-h, peak 5.
     *   Team: 64 GiB-h reserved, 23 GiB-h used; peak of A+B at one instant:
     *     1h 4, 1.5h 6, 2h 8+3 = 11, 2.5h 6+3 = 9, 3h 3, 4h 5 → 11 GiB (the peaks add up to 13).
     */
    const expected = {
      reservedGibHours: 64,
      usedGibHours: 23,
      shardCount: 2,
      peakUsed: { bytes: String(11 * GiB), human: '11 GiB' },
    };
    const expectedShards = () =>
      [
        {
          shardId: shard.A,
          shardName: 'train-a',
          hostId: 'h1',
          reservedGibHours: 40,
          usedGibHours: 12,
          peakUsed: { bytes: String(8 * GiB), human: '8 GiB' },
        },
        {
          shardId: shard.B,
          shardName: 'serve-b',
          hostId: 'h1',
          reservedGibHours: 24,
          usedGibHours: 11,
          peakUsed: { bytes: String(5 * GiB), human: '5 GiB' },
        },
      ].sort((x, y) => (x.shardId < y.shardId ? -1 : 1));

    function assertExpected(report: Usage['usage']): void {
      const { reservedGibHours, usedGibHours, shardCount, peakUsed } = report;
      assert.deepEqual({ reservedGibHours, usedGibHours, shardCount, peakUsed }, expected);
      assert.deepEqual(
        report.shards.edges.map((e) => e.node),
        expectedShards(),
      );
    }

    it('reserved and used GiB-hours and peaks over a window, exactly as worked out by hand', async () => {
      const report = ok(await usage({ from: iso(1), to: iso(5) })).usage;
      assertExpected(report);
      assert.deepEqual(report.team, { id: teamA, name: 'acct-a' });
      assert.equal(report.from, iso(1));
      assert.equal(report.to, iso(5));
      assert.equal(report.measuredUntil, iso(5), 'the window is in the past');
      // Time zones are honoured: the same instants written at +02:00.
      const shifted = (hours: number) =>
        new Date(T0 + (hours + 2) * HOUR).toISOString().replace('.000Z', '+02:00');
      assertExpected(ok(await usage({ from: shifted(1), to: shifted(5) })).usage);
    });

    it('a window over part of the history; windows add up', async () => {
      const first = ok(await usage({ from: iso(1), to: iso(2.5) })).usage;
      const second = ok(await usage({ from: iso(2.5), to: iso(5) })).usage;
      // [1h, 2.5h): A 20 GiB × 1.5h = 30, used 2 + 3 + 4 = 9 (peak 8); B 8 × 0.5h = 4, used 1.5.
      assert.deepEqual(
        [first.reservedGibHours, first.usedGibHours, first.peakUsed.bytes],
        [34, 10.5, String(11 * GiB)],
      );
      assert.equal(first.reservedGibHours + second.reservedGibHours, 64);
      assert.equal(first.usedGibHours + second.usedGibHours, 23);
      // [2.5h, 5h): A and B together: 6+3 = 9 GiB at 2.5h is the most.
      assert.equal(second.peakUsed.bytes, String(9 * GiB));
      const none = ok(await usage({ from: iso(-5), to: iso(-1) })).usage;
      assert.deepEqual(
        [none.reservedGibHours, none.usedGibHours, none.shardCount, none.peakUsed.bytes],
        [0, 0, 0, '0'],
      );
      assert.deepEqual(none.shards.edges, []);
    });

    it('days: the window per UTC day, clipped to it, adding up to the whole', async () => {
      type Day = {
        day: string;
        reservedGibHours: number;
        usedGibHours: number;
        suspendedGibHours: number;
        peakUsed: { bytes: string };
      };
      const DAYS = `query ($teamId: ID!, $from: String!, $to: String!) {
        usage(teamId: $teamId, from: $from, to: $to) {
          reservedGibHours usedGibHours
          days { day reservedGibHours usedGibHours suspendedGibHours peakUsed { bytes } }
        }
      }`;
      const daysOf = async (from: string, to: string) =>
        ok(
          await h.graphql<{
            usage: { reservedGibHours: number; usedGibHours: number; days: Day[] };
          }>(DAYS, { teamId: teamA, from, to }),
        ).usage;
      // From 1h before T0's midnight to 5h after it: the day before (nothing held) and T0's day.
      const report = await daysOf(iso(-1), iso(5));
      assert.deepEqual(
        report.days.map((d) => d.day),
        [at(-1).toISOString().slice(0, 10), at(0).toISOString().slice(0, 10)],
      );
      const [before, day] = report.days;
      assert.deepEqual(
        [before!.reservedGibHours, before!.usedGibHours, before!.peakUsed.bytes],
        [0, 0, '0'],
      );
      const partOfDay = ok(await usage({ from: iso(0), to: iso(5) })).usage;
      assert.deepEqual(
        [day!.reservedGibHours, day!.usedGibHours, day!.peakUsed.bytes, day!.suspendedGibHours],
        [partOfDay.reservedGibHours, partOfDay.usedGibHours, partOfDay.peakUsed.bytes, 0],
      );
      assert.ok(day!.reservedGibHours >= 64, 'the day holds [1h, 5h) at least');
      assert.equal(before!.reservedGibHours + day!.reservedGibHours, report.reservedGibHours);
    });

    it('a running shard counts up to the window end, and no further than now', async () => {
      const report = ok(await usage({ from: iso(4), to: iso(8) })).usage;
      // B: 8 GiB × 4h = 32 reserved; used 5 over 4h–6h and 7 over 6h–8h = 24. A ended at 3h.
      assert.deepEqual(
        [report.reservedGibHours, report.usedGibHours, report.shardCount],
        [32, 24, 1],
      );

      const from = Date.now() - 2 * HOUR;
      const before = Date.now();
      const current = ok(
        await usage({
          from: new Date(from).toISOString(),
          to: new Date(from + 3 * HOUR).toISOString(),
        }),
      ).usage;
      const afterwards = Date.now();
      const measured = Date.parse(current.measuredUntil);
      assert.ok(before <= measured && measured <= afterwards, 'measured up to the query');
      // B alone (8 GiB) over [from, measuredUntil); GiB-hours are a double, hence the tolerance.
      assert.ok(Math.abs(current.reservedGibHours - (8 * (measured - from)) / HOUR) < 1e-9);
    });

    it('repeated and out-of-order samples change nothing; a late sample counts at once', async () => {
      // Every sample again (the key makes them no-ops), plus readings that repeat the value
      // already in effect, written late and out of order.
      await h.prisma.usageSample.createMany({
        data: sampleRows([...samples, [shard.A, 'GPU-g1', 2.25, 6], [shard.B, 'GPU-g1', 3, 3]]),
        skipDuplicates: true,
      });
      assertExpected(ok(await usage({ from: iso(1), to: iso(5) })).usage);

      // A reading that does change the past, arriving late: A/g2 used 1 GiB from 1.25h.
      // A: 1.25h–1.5h is 4+1 instead of 4 → +0.25 GiB-h.
      await h.prisma.usageSample.create({
        data: sampleRows([[shard.A, 'GPU-g2', 1.25, 1]])[0]!,
      });
      const report = ok(await usage({ from: iso(1), to: iso(5) })).usage;
      assert.equal(report.usedGibHours, 23.25);
      assert.equal(report.reservedGibHours, 64);
      await h.prisma.usageSample.deleteMany({ where: { shardId: shard.A, at: at(1.25) } });
    });

    it('a shard resized while held counts each size for its own time', async () => {
      // Reserved 4 GiB × 1h + 6 GiB × 2h = 16; used 1 GiB over 1h–2.5h + 5 GiB over 2.5h–4h = 9.
      const report = ok(await usage({ teamId: teamC, from: iso(0), to: iso(5) })).usage;
      assert.deepEqual(
        [report.reservedGibHours, report.usedGibHours, report.peakUsed.bytes, report.shardCount],
        [16, 9, String(5 * GiB), 1],
      );
      assert.equal(report.shards.edges[0]?.node.reservedGibHours, 16);
    });

    it('shards are a connection, by shard id', async () => {
      const first = ok(await usage({ from: iso(1), to: iso(5), first: 1 })).usage.shards;
      assert.equal(first.edges.length, 1);
      assert.equal(first.pageInfo.hasNextPage, true);
      const second = ok(
        await usage({ from: iso(1), to: iso(5), first: 1, after: first.pageInfo.endCursor }),
      ).usage.shards;
      assert.equal(second.pageInfo.hasNextPage, false);
      assert.deepEqual(
        [...first.edges, ...second.edges].map((e) => e.node),
        expectedShards(),
      );
    });

    it("team tokens read their own team's usage; another team's is NOT_FOUND, like a missing one", async () => {
      assertExpected(ok(await usage({ from: iso(1), to: iso(5) }, tokenA)).usage);
      const other = await usage({ from: iso(1), to: iso(5) }, tokenB);
      const missing = await usage({ teamId: randomUUID(), from: iso(1), to: iso(5) }, tokenB);
      assertError(other, 'NOT_FOUND');
      assertError(missing, 'NOT_FOUND');
      assert.equal(other.data, null);
      assert.ok(!JSON.stringify(other).includes('train-a'));
      const own = ok(await usage({ teamId: teamB, from: iso(1), to: iso(5) }, tokenB)).usage;
      // D: 16 GiB × 4h = 64 reserved, 12 GiB used throughout = 48.
      assert.deepEqual([own.reservedGibHours, own.usedGibHours, own.shardCount], [64, 48, 1]);
      assertError(await usage({ from: iso(1), to: iso(5) }, null), 'UNAUTHENTICATED');
    });

    it('bad windows and ids are BAD_USER_INPUT, naming the field', async () => {
      const cases: [Record<string, unknown>, string][] = [
        [{ from: iso(5), to: iso(1) }, 'to'],
        [{ from: iso(1), to: iso(1) }, 'to'],
        [{ from: iso(0), to: iso(31 * 24 + 1) }, 'to'],
        [{ from: '2026-01-01', to: iso(1) }, 'from'],
        [{ from: '2026-01-01T00:00:00', to: iso(1) }, 'from'],
        [{ from: iso(0), to: '2026-02-30T00:00:00Z' }, 'to'],
        [{ from: iso(0), to: '2026-01-01T24:00:00Z' }, 'to'],
        [{ from: 'yesterday', to: iso(1) }, 'from'],
        [{ from: '', to: iso(1) }, 'from'],
        [{ from: `${iso(0)} `, to: iso(1) }, 'from'],
        [{ teamId: 'nope', from: iso(0), to: iso(1) }, 'teamId'],
      ];
      for (const [variables, field] of cases) {
        const response = await usage(variables);
        assertError(response, 'BAD_USER_INPUT', JSON.stringify(variables));
        const problems = response.errors![0]!.extensions!['problems'] as { field: string }[];
        assert.ok(
          problems.some((p) => p.field === field),
          `${JSON.stringify(variables)}: ${JSON.stringify(problems)}`,
        );
      }
      assert.ok(ok(await usage({ from: iso(0), to: iso(31 * 24) })).usage, '31 days are fine');
      assertError(await usage({ from: 5, to: iso(1) }), 'BAD_USER_INPUT', 'not a string');
    });

    it('/metrics reports GPUs, live shards, teams and hosts from the database', async () => {
      const scrape = async () => {
        const response = await fetch(`${h.controlPlane.url}/metrics`);
        assert.equal(response.status, 200);
        return parseMetrics(await response.text());
      };
      const metrics = await scrape();
      const H100 = 'NVIDIA H100 80GB HBM3';
      const expectedSeries: Record<string, number> = {
        gpushards_metrics_database_up: 1,
        'gpushards_hosts{state="ONLINE"}': 1,
        'gpushards_hosts{state="CORDONED"}': 1,
        'gpushards_hosts{state="OFFLINE"}': 0,
        'gpushards_hosts{state="DRAINING"}': 0,
        [`gpushards_gpu_total_bytes{host="h1",gpu="GPU-g1",model="${H100}"}`]: 80 * GiB,
        [`gpushards_gpu_reserved_bytes{host="h1",gpu="GPU-g1",model="${H100}"}`]: 8 * GiB,
        [`gpushards_gpu_used_bytes{host="h1",gpu="GPU-g1",model="${H100}"}`]: 30 * GiB,
        [`gpushards_gpu_reserved_bytes{host="h1",gpu="GPU-g2",model="${H100}"}`]: 16 * GiB,
        'gpushards_gpu_total_bytes{host="h2",gpu="GPU-g3",model="NVIDIA L4"}': 24 * GiB,
        'gpushards_gpu_reserved_bytes{host="h2",gpu="GPU-g3",model="NVIDIA L4"}': 0,
        'gpushards_gpu_used_bytes{host="h2",gpu="GPU-g3",model="NVIDIA L4"}': 1 * GiB,
        [`gpushards_shard_limit_bytes{shard="${shard.B}",team="acct-a",host="h1"}`]: 8 * GiB,
        [`gpushards_shard_used_bytes{shard="${shard.B}",team="acct-a",host="h1"}`]: 5 * GiB,
        [`gpushards_shard_limit_bytes{shard="${shard.D}",team="acct-b",host="h1"}`]: 16 * GiB,
        [`gpushards_shard_used_bytes{shard="${shard.D}",team="acct-b",host="h1"}`]: 12 * GiB,
        'gpushards_team_quota_bytes{team="acct-a"}': 48 * GiB,
        'gpushards_team_reserved_bytes{team="acct-a"}': 7.5 * GiB,
        'gpushards_team_reserved_bytes{team="acct-b"}': 15.5 * GiB,
        'gpushards_team_shards{team="acct-a"}': 1,
        'gpushards_team_shards{team="acct-b"}': 1,
      };
      for (const [key, value] of Object.entries(expectedSeries)) {
        assert.equal(metrics.get(key), value, key);
      }
      const namesOf = (prefix: string) => [...metrics.keys()].filter((k) => k.startsWith(prefix));
      assert.equal(namesOf('gpushards_gpu_total_bytes{').length, 3);
      assert.equal(
        namesOf('gpushards_shard_limit_bytes{').length,
        2,
        'released reservations (A, C) have no series',
      );
      assert.deepEqual(namesOf('gpushards_team_quota_bytes{'), [
        'gpushards_team_quota_bytes{team="acct-a"}',
      ]);

      // Values are read at each scrape: a release and a heartbeat show up at once.
      await h.prisma.$transaction([
        h.prisma.shardGpu.updateMany({
          where: { shardId: shard.D, releasedAt: null },
          data: { releasedAt: new Date() },
        }),
        h.prisma.gpu.update({
          where: { uuid: 'GPU-g2' },
          data: { reservedBytes: 0n, usedBytes: 12_345n },
        }),
        h.prisma.shard.update({ where: { id: shard.D }, data: { state: 'STOPPED' } }),
        h.prisma.host.update({ where: { id: 'h2' }, data: { state: 'OFFLINE' } }),
      ]);
      const later = await scrape();
      assert.equal(
        later.get(`gpushards_gpu_used_bytes{host="h1",gpu="GPU-g2",model="${H100}"}`),
        12_345,
      );
      assert.equal(later.get('gpushards_team_reserved_bytes{team="acct-b"}'), 0);
      assert.equal(later.get('gpushards_hosts{state="OFFLINE"}'), 1);
      assert.equal(later.get('gpushards_hosts{state="CORDONED"}'), 0);
      assert.equal(
        later.get(`gpushards_shard_limit_bytes{shard="${shard.D}",team="acct-b",host="h1"}`),
        undefined,
      );
    });
  });
}
