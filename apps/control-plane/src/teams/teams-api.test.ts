import assert from 'node:assert/strict';
import { createHash, randomUUID } from 'node:crypto';
import { after, before, describe, it } from 'node:test';
import {
  startApiTestHarness,
  type ApiTestHarness,
  type GraphqlResponse,
} from '../testing/api-test-harness.js';
import { startPostgres, TEST_DATABASE_KINDS, type PostgresServer } from '../testing/index.js';

/** Teams, quotas, tokens and auth through HTTP GraphQL, on PostgreSQL and on PGlite. */

let postgres: PostgresServer | undefined;
before(async () => {
  postgres = await startPostgres();
});
after(async () => {
  await postgres?.stop();
});

function errorCode(response: GraphqlResponse): string | undefined {
  return response.errors?.[0]?.extensions?.code;
}

function assertError(response: GraphqlResponse, code: string, context = ''): void {
  assert.equal(errorCode(response), code, `${context} ${JSON.stringify(response)}`);
  assert.ok(!JSON.stringify(response).includes('stacktrace'), 'no stack trace in responses');
}

const ME = `{ me { id name role prefix team { id name } } }`;
const CREATE_TEAM = `mutation ($name: String!) { createTeam(name: $name) { id name } }`;
const SET_QUOTA = `mutation ($teamId: ID!, $input: QuotaPolicyInput!) {
  setQuotaPolicy(teamId: $teamId, input: $input) {
    id quotaPolicy { maxTotal { bytes human } maxPerShard { bytes human } maxShards maxGpusPerShard allowedGpuModels priority }
  }
}`;
const CREATE_TOKEN = `mutation ($teamId: ID, $role: Role!, $name: String!) {
  createApiToken(teamId: $teamId, role: $role, name: $name) { secret token { id name role prefix team { id } } }
}`;
const REVOKE_TOKEN = `mutation ($id: ID!) { revokeApiToken(id: $id) { id revokedAt } }`;
const TEAM = `query ($id: ID!) {
  team(id: $id) { id name usage { shardCount reserved { bytes human } } apiTokens { edges { node { id name } } } }
}`;
const TEAMS = `query ($first: Int, $after: String) {
  teams(first: $first, after: $after) { edges { cursor node { id name } } pageInfo { hasNextPage hasPreviousPage endCursor } }
}`;

const validQuota = { maxTotal: '48g', maxShards: 8, maxPerShard: '24g' };

for (const kind of TEST_DATABASE_KINDS) {
  describe(`teams, tokens and auth on ${kind}`, () => {
    let h: ApiTestHarness;

    before(async () => {
      h = await startApiTestHarness(kind, postgres ? { server: postgres } : {});
    });
    after(async () => {
      await h?.close();
    });

    async function createTeam(name: string): Promise<string> {
      const response = await h.graphql<{ createTeam: { id: string } }>(CREATE_TEAM, { name });
      assert.equal(response.errors, undefined, JSON.stringify(response.errors));
      return response.data!.createTeam.id;
    }

    async function createToken(
      teamId: string | null,
      role: string,
      name = `${role.toLowerCase()} token`,
    ): Promise<{ id: string; secret: string }> {
      const response = await h.graphql<{
        createApiToken: { secret: string; token: { id: string } };
      }>(CREATE_TOKEN, { teamId, role, name });
      assert.equal(response.errors, undefined, JSON.stringify(response.errors));
      const created = response.data!.createApiToken;
      return { id: created.token.id, secret: created.secret };
    }

    /** Row counts of everything a mutation here could write. */
    async function rowCounts() {
      const [teams, tokens, policies, audits] = await Promise.all([
        h.prisma.team.count(),
        h.prisma.apiToken.count(),
        h.prisma.quotaPolicy.count(),
        h.prisma.auditEvent.count(),
      ]);
      return { teams, tokens, policies, audits };
    }

    it('me: the bootstrap admin token, fleet-wide', async () => {
      const response = await h.graphql<{ me: { role: string; team: unknown; prefix: string } }>(ME);
      assert.equal(response.errors, undefined);
      assert.equal(response.data!.me.role, 'ADMIN');
      assert.equal(response.data!.me.team, null);
      assert.ok(h.adminToken.startsWith(response.data!.me.prefix));
    });

    it('adminApiTokens lists the fleet-wide tokens, for admins only', async () => {
      const query = `{ adminApiTokens { edges { node { name role team { id } } } } }`;
      const response = await h.graphql<{ adminApiTokens: { edges: { node: unknown }[] } }>(query);
      assert.deepEqual(response.data!.adminApiTokens.edges[0]!.node, {
        name: 'bootstrap admin',
        role: 'ADMIN',
        team: null,
      });
      const teamId = await createTeam('admin-list-team');
      const member = await createToken(teamId, 'MEMBER');
      assertError(await h.graphql(query, {}, member.secret), 'FORBIDDEN');
    });

    it('no, malformed, unknown or garbage tokens are UNAUTHENTICATED, for queries and mutations', async () => {
      const unknown = 'gps_' + 'A'.repeat(43);
      for (const token of [null, '', 'not-a-token', unknown, "'; DROP TABLE api_token; --"]) {
        assertError(await h.graphql(ME, {}, token), 'UNAUTHENTICATED', `token ${token}`);
        assertError(await h.graphql(CREATE_TEAM, { name: 'x' }, token), 'UNAUTHENTICATED');
      }
      const basic = await fetch(h.controlPlane.graphqlUrl, {
        method: 'POST',
        headers: { 'content-type': 'application/json', authorization: `Basic ${h.adminToken}` },
        body: JSON.stringify({ query: ME }),
      });
      assertError((await basic.json()) as GraphqlResponse, 'UNAUTHENTICATED');
      assert.equal(await h.prisma.team.count({ where: { name: 'x' } }), 0);
    });

    it('createTeam writes the team and its audit event; a second team of that name is a CONFLICT', async () => {
      const id = await createTeam('vision');
      const team = await h.prisma.team.findUniqueOrThrow({ where: { id } });
      assert.equal(team.name, 'vision');
      const admin = await h.prisma.apiToken.findFirstOrThrow({ where: { role: 'ADMIN' } });
      const audit = await h.prisma.auditEvent.findFirstOrThrow({
        where: { action: 'team.create', targetId: id },
      });
      assert.equal(audit.actorTokenId, admin.id);
      assert.equal(audit.actorRole, 'ADMIN');
      assert.equal(audit.teamId, id);
      const before = await rowCounts();
      assertError(await h.graphql(CREATE_TEAM, { name: 'vision' }), 'CONFLICT');
      assert.deepEqual(await rowCounts(), before);
    });

    it('setQuotaPolicy takes sizes as strings and returns exact bytes and a human size', async () => {
      const teamId = await createTeam('quota-team');
      const response = await h.graphql<{
        setQuotaPolicy: { quotaPolicy: Record<string, unknown> };
      }>(SET_QUOTA, {
        teamId,
        input: {
          ...validQuota,
          maxGpusPerShard: 2,
          allowedGpuModels: ['NVIDIA H100 80GB HBM3'],
          priority: 5,
        },
      });
      assert.equal(response.errors, undefined, JSON.stringify(response.errors));
      assert.deepEqual(response.data!.setQuotaPolicy.quotaPolicy, {
        maxTotal: { bytes: String(48 * 2 ** 30), human: '48 GiB' },
        maxPerShard: { bytes: String(24 * 2 ** 30), human: '24 GiB' },
        maxShards: 8,
        maxGpusPerShard: 2,
        allowedGpuModels: ['NVIDIA H100 80GB HBM3'],
        priority: 5,
      });
      // Replacing: fields left out go back to their defaults.
      const replaced = await h.graphql<{
        setQuotaPolicy: { quotaPolicy: Record<string, unknown> };
      }>(SET_QUOTA, { teamId, input: { maxTotal: '1.5t', maxShards: 0, maxPerShard: '0' } });
      assert.equal(replaced.errors, undefined, JSON.stringify(replaced.errors));
      const policy = await h.prisma.quotaPolicy.findUniqueOrThrow({ where: { teamId } });
      assert.equal(policy.maxTotalBytes, 1536n * 2n ** 30n);
      assert.equal(policy.maxBytesPerShard, 0n);
      assert.equal(policy.maxGpusPerShard, null);
      assert.deepEqual(policy.allowedGpuModels, []);
      const audits = await h.prisma.auditEvent.findMany({
        where: { action: 'quota.set', targetId: teamId },
      });
      assert.equal(audits.length, 2);
      assert.equal(
        (audits[0]!.details as Record<string, unknown>)['maxTotalBytes'] !== undefined,
        true,
      );
    });

    it('team(id) shows usage (nothing held yet) and unknown ids are NOT_FOUND', async () => {
      const teamId = await createTeam('usage-team');
      const response = await h.graphql<{ team: { usage: unknown } }>(TEAM, { id: teamId });
      assert.equal(response.errors, undefined);
      assert.deepEqual(response.data!.team.usage, {
        shardCount: 0,
        reserved: { bytes: '0', human: '0 B' },
      });
      assertError(await h.graphql(TEAM, { id: randomUUID() }), 'NOT_FOUND');
      assertError(await h.graphql(TEAM, { id: 'nope' }), 'BAD_USER_INPUT');
    });

    it('createApiToken returns the secret once and stores only its sha256; a revoked token is UNAUTHENTICATED', async () => {
      const teamId = await createTeam('token-team');
      const { id, secret } = await createToken(teamId, 'MEMBER', 'ci runner');
      assert.match(secret, /^gps_[A-Za-z0-9_-]{43}$/);
      const row = await h.prisma.apiToken.findUniqueOrThrow({ where: { id } });
      assert.equal(row.tokenHash, createHash('sha256').update(secret).digest('hex'));
      assert.ok(!JSON.stringify(row).includes(secret.slice(4)), 'the secret is not stored');
      const me = await h.graphql<{ me: { id: string; role: string; team: { id: string } } }>(
        ME,
        {},
        secret,
      );
      assert.equal(me.data!.me.id, id);
      assert.equal(me.data!.me.role, 'MEMBER');
      assert.equal(me.data!.me.team.id, teamId);

      const revoked = await h.graphql<{ revokeApiToken: { revokedAt: string | null } }>(
        REVOKE_TOKEN,
        { id },
      );
      assert.equal(revoked.errors, undefined);
      assert.ok(revoked.data!.revokeApiToken.revokedAt);
      assertError(await h.graphql(ME, {}, secret), 'UNAUTHENTICATED');
      // Revoking again changes nothing and writes no second event.
      assert.equal((await h.graphql(REVOKE_TOKEN, { id })).errors, undefined);
      const events = await h.prisma.auditEvent.findMany({
        where: { targetId: id },
        orderBy: { at: 'asc' },
      });
      assert.deepEqual(
        events.map((e) => e.action),
        ['token.create', 'token.revoke'],
      );
      assert.equal(events[1]!.teamId, teamId);
    });

    it('members create MEMBER and VIEWER tokens of their own team only; the last admin token stays', async () => {
      const teamId = await createTeam('member-team');
      const member = await createToken(teamId, 'MEMBER');
      const own = await h.graphql<{ createApiToken: { token: { team: { id: string } } } }>(
        CREATE_TOKEN,
        { role: 'VIEWER', name: 'dashboard' },
        member.secret,
      );
      assert.equal(own.errors, undefined, JSON.stringify(own.errors));
      assert.equal(
        own.data!.createApiToken.token.team.id,
        teamId,
        'teamId defaults to the own team',
      );
      assertError(
        await h.graphql(CREATE_TOKEN, { role: 'ADMIN', name: 'escalate' }, member.secret),
        'FORBIDDEN',
      );
      const me = await h.graphql<{ me: { id: string } }>(ME);
      assertError(await h.graphql(REVOKE_TOKEN, { id: me.data!.me.id }), 'CONFLICT');
      const second = await createToken(null, 'ADMIN', 'second admin');
      assert.equal((await h.graphql(REVOKE_TOKEN, { id: second.id })).errors, undefined);
    });

    it('viewers cannot mutate, members cannot administer: FORBIDDEN, nothing written', async () => {
      const teamId = await createTeam('roles-team');
      const viewer = await createToken(teamId, 'VIEWER');
      const member = await createToken(teamId, 'MEMBER');
      const before = await rowCounts();
      for (const [token, mutation, variables] of [
        [viewer, CREATE_TEAM, { name: 'by-viewer' }],
        [viewer, SET_QUOTA, { teamId, input: validQuota }],
        [viewer, CREATE_TOKEN, { teamId, role: 'VIEWER', name: 'by viewer' }],
        [viewer, REVOKE_TOKEN, { id: member.id }],
        [member, CREATE_TEAM, { name: 'by-member' }],
        [member, SET_QUOTA, { teamId, input: validQuota }],
      ] as const) {
        assertError(await h.graphql(mutation, variables, token.secret), 'FORBIDDEN', mutation);
      }
      assert.deepEqual(await rowCounts(), before);
      const read = await h.graphql(TEAM, { id: teamId }, viewer.secret);
      assert.equal(read.errors, undefined, 'viewers read their own team');
    });

    it('a token of team A can neither see nor change anything of team B', async () => {
      const teamA = await createTeam('isolation-a');
      const teamB = await createTeam('isolation-b');
      const memberA = await createToken(teamA, 'MEMBER');
      const viewerA = await createToken(teamA, 'VIEWER');
      const tokenB = await createToken(teamB, 'MEMBER', 'b secret name');
      const before = await rowCounts();
      for (const a of [memberA, viewerA]) {
        const teams = await h.graphql<{ teams: { edges: { node: { id: string } }[] } }>(
          TEAMS,
          {},
          a.secret,
        );
        assert.deepEqual(
          teams.data!.teams.edges.map((e) => e.node.id),
          [teamA],
        );
        // Another team's id answers exactly like an id that does not exist.
        const other = await h.graphql(TEAM, { id: teamB }, a.secret);
        const missing = await h.graphql(TEAM, { id: randomUUID() }, a.secret);
        assertError(other, 'NOT_FOUND');
        assertError(missing, 'NOT_FOUND');
        assert.equal(
          other.errors![0]!.message.replace(teamB, 'ID'),
          missing.errors![0]!.message.replace(/"[^"]+"/, '"ID"'),
        );
        const me = await h.graphql<{ me: { team: { id: string } } }>(ME, {}, a.secret);
        assert.equal(me.data!.me.team.id, teamA);
        const ownTokens = await h.graphql<{
          team: { apiTokens: { edges: { node: { name: string } }[] } };
        }>(TEAM, { id: teamA }, a.secret);
        assert.ok(!JSON.stringify(ownTokens).includes('b secret name'));
      }
      assertError(
        await h.graphql(
          CREATE_TOKEN,
          { teamId: teamB, role: 'MEMBER', name: 'intruder' },
          memberA.secret,
        ),
        'NOT_FOUND',
      );
      assertError(await h.graphql(REVOKE_TOKEN, { id: tokenB.id }, memberA.secret), 'NOT_FOUND');
      assertError(
        await h.graphql(SET_QUOTA, { teamId: teamB, input: validQuota }, memberA.secret),
        'FORBIDDEN',
      );
      assert.deepEqual(await rowCounts(), before);
      assert.equal(
        (await h.prisma.apiToken.findUniqueOrThrow({ where: { id: tokenB.id } })).revokedAt,
        null,
      );
      assert.equal(
        (await h.graphql(ME, {}, tokenB.secret)).errors,
        undefined,
        "B's token still works",
      );
    });

    it('bad input to every mutation is BAD_USER_INPUT and writes nothing', async () => {
      const teamId = await createTeam('input-team');
      // Near the body limit (256 KiB): still parsed, refused by validation.
      const huge = 'a'.repeat(200 * 1024);
      const injection = "'; DROP TABLE team; --";
      const before = await rowCounts();
      const cases: [string, Record<string, unknown>][] = [
        ...['', huge, injection, 'Upper', 'trailing-', 'ümlaut', 'a b', 'x'.repeat(64)].map(
          (name): [string, Record<string, unknown>] => [CREATE_TEAM, { name }],
        ),
        ...[
          '12gb',
          'abc',
          '-1g',
          '',
          '1e9',
          '12 parsecs',
          '50%',
          injection,
          huge,
          '99999999999t',
        ].map((size): [string, Record<string, unknown>] => [
          SET_QUOTA,
          { teamId, input: { ...validQuota, maxTotal: size } },
        ]),
        [SET_QUOTA, { teamId, input: { ...validQuota, maxPerShard: '64g' } }],
        [SET_QUOTA, { teamId, input: { ...validQuota, maxShards: -1 } }],
        [SET_QUOTA, { teamId, input: { ...validQuota, maxGpusPerShard: 0 } }],
        [SET_QUOTA, { teamId, input: { ...validQuota, allowedGpuModels: [injection] } }],
        [SET_QUOTA, { teamId: injection, input: validQuota }],
        ...['', huge, injection, 'tab\there', '<script>'].map(
          (name): [string, Record<string, unknown>] => [
            CREATE_TOKEN,
            { teamId, role: 'MEMBER', name },
          ],
        ),
        [CREATE_TOKEN, { teamId, role: 'ADMIN', name: 'admin of a team' }],
        [CREATE_TOKEN, { role: 'MEMBER', name: 'member of no team' }],
        [CREATE_TOKEN, { teamId: injection, role: 'MEMBER', name: 'ok' }],
        [REVOKE_TOKEN, { id: injection }],
        [TEAMS, { first: 0 }],
        [TEAMS, { after: 'not a cursor' }],
      ];
      for (const [query, variables] of cases) {
        const response = await h.graphql(query, variables);
        assertError(
          response,
          'BAD_USER_INPUT',
          `${query.slice(0, 40)} ${JSON.stringify(variables).slice(0, 80)}`,
        );
        assert.ok(JSON.stringify(response).length < 2000, 'errors do not echo long input');
      }
      assert.deepEqual(await rowCounts(), before);
      assert.ok((await h.prisma.team.count()) > 0, 'the team table is still there');
    });

    it('teams page with first/after', async () => {
      await createTeam('page-1');
      await createTeam('page-2');
      const first = await h.graphql<{
        teams: {
          edges: { node: { name: string } }[];
          pageInfo: { hasNextPage: boolean; endCursor: string };
        };
      }>(TEAMS, { first: 1 });
      assert.equal(first.data!.teams.edges.length, 1);
      assert.equal(first.data!.teams.pageInfo.hasNextPage, true);
      const all: string[] = [];
      let after: string | null = null;
      for (;;) {
        const page: GraphqlResponse<{
          teams: {
            edges: { node: { name: string } }[];
            pageInfo: { hasNextPage: boolean; endCursor: string };
          };
        }> = await h.graphql(TEAMS, { first: 2, after });
        all.push(...page.data!.teams.edges.map((e) => e.node.name));
        if (!page.data!.teams.pageInfo.hasNextPage) break;
        after = page.data!.teams.pageInfo.endCursor;
      }
      const names = (await h.prisma.team.findMany({ orderBy: { name: 'asc' } })).map((t) => t.name);
      assert.deepEqual(all, names);
    });

    it("a team's tokens page in creation order; revoked ones only when asked for", async () => {
      const teamId = await createTeam('token-pages');
      const created = [];
      for (const name of ['one', 'two', 'three'])
        created.push(await createToken(teamId, 'VIEWER', name));
      await h.graphql(REVOKE_TOKEN, { id: created[1]!.id });
      const query = `query ($id: ID!, $after: String, $all: Boolean) {
        team(id: $id) { apiTokens(first: 1, after: $after, includeRevoked: $all) {
          edges { node { name } } pageInfo { hasNextPage endCursor } } }
      }`;
      type Page = {
        team: {
          apiTokens: {
            edges: { node: { name: string } }[];
            pageInfo: { hasNextPage: boolean; endCursor: string };
          };
        };
      };
      const names = async (all: boolean) => {
        const seen: string[] = [];
        let after: string | null = null;
        for (;;) {
          const page: GraphqlResponse<Page> = await h.graphql(query, { id: teamId, after, all });
          const tokens = page.data!.team.apiTokens;
          seen.push(...tokens.edges.map((e) => e.node.name));
          if (!tokens.pageInfo.hasNextPage) return seen;
          after = tokens.pageInfo.endCursor;
        }
      };
      assert.deepEqual(await names(true), ['one', 'two', 'three']);
      assert.deepEqual(await names(false), ['one', 'three']);
    });

    it('readyz: the database is reachable and migrated', async () => {
      const response = await fetch(`${h.controlPlane.url}/readyz`);
      assert.equal(response.status, 200);
      assert.deepEqual(await response.json(), { status: 'ready' });
    });
  });
}
