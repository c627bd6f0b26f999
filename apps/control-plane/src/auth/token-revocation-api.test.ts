import assert from 'node:assert/strict';
import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, before, describe, it } from 'node:test';
import { createControlPlane, type ControlPlane } from '../control-plane.js';
import { startApiTestHarness, type ApiTestHarness } from '../testing/api-test-harness.js';
import { assertError, assertOk, createTestTeam, type TestTeam } from '../testing/fleet-fixtures.js';
import { startPostgres, type PostgresServer } from '../testing/index.js';
import { AuthService } from './auth.service.js';

/** A revoked token is refused on the very next request, on every control plane of a database. */

const ME = '{ me { id role } }';
const REVOKE = 'mutation ($id: ID!) { revokeApiToken(id: $id) { id revokedAt } }';

describe('token revocation across two control planes on one PostgreSQL', () => {
  let postgres: PostgresServer;
  let h: ApiTestHarness;
  let other: ControlPlane;
  let otherDataDir: string;
  let team: TestTeam;

  async function meOn(controlPlane: ControlPlane, token: string) {
    const response = await fetch(controlPlane.graphqlUrl, {
      method: 'POST',
      headers: { 'content-type': 'application/json', authorization: `Bearer ${token}` },
      body: JSON.stringify({ query: ME }),
    });
    return (await response.json()) as {
      data?: { me: { id: string } } | null;
      errors?: { extensions?: Record<string, unknown> }[];
    };
  }

  before(async () => {
    postgres = await startPostgres();
    h = await startApiTestHarness('postgres', { server: postgres });
    otherDataDir = await mkdtemp(join(tmpdir(), 'gpushards-revoke-'));
    other = await createControlPlane({
      dataDir: otherDataDir,
      database: h.controlPlane.config.database,
      port: 0,
      logLevel: 'silent',
      operatorOutput: { write: () => true } as unknown as NodeJS.WritableStream,
    });
    team = await createTestTeam(h, 'revoked');
  });

  after(async () => {
    await other?.close();
    await h?.close();
    await postgres?.stop();
    if (otherDataDir) await rm(otherDataDir, { recursive: true, force: true });
  });

  it('revoked through one control plane: refused there at once, and on the other when its notification arrives', async () => {
    const me = assertOk(await h.graphql<{ me: { id: string } }>(ME, {}, team.member)).me;
    // Both control planes have the token in their cache.
    assert.equal((await meOn(other, team.member)).data?.me.id, me.id);
    assert.equal((await meOn(h.controlPlane, team.member)).data?.me.id, me.id);

    const forgotten = new Promise<void>((resolve) => {
      const stop = other.app.get(AuthService).onForget((tokenId) => {
        if (tokenId !== me.id) return;
        stop();
        resolve();
      });
    });
    assertOk(await h.graphql(REVOKE, { id: me.id }));
    assertError(await h.graphql(ME, {}, team.member), 'UNAUTHENTICATED');
    await forgotten;
    const answer = await meOn(other, team.member);
    assert.equal(answer.errors?.[0]?.extensions?.['code'], 'UNAUTHENTICATED');
    assert.equal(answer.data ?? null, null);
    // The other token of the team is untouched.
    assert.ok((await meOn(other, team.viewer)).data?.me.id);
  });
});
