// Sign-in through OpenID Connect as a person does it: a real provider (oidc-provider, its own
// process, users in groups), the one box pointed at it, and Chromium signing in through the
// provider's pages. The person sees exactly the teams their groups give; a group change counts
// at the next sign-in; sign-out, the provider refusing the session (the person disabled
// there) and signing out at the provider (its back-channel logout token) end it, also on an
// open subscription (graphql-ws); a logout token the provider did not sign ends nothing; an
// expired session is refused, its subscription ended; the CLI signs in with a device code.
import assert from 'node:assert/strict';
import { spawn } from 'node:child_process';
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { dirname, join } from 'node:path';
import { after, before, describe, it } from 'node:test';
import { fileURLToPath } from 'node:url';
import { createClient } from 'graphql-ws';
import { generateKeyPair, SignJWT } from 'jose';
import { chromium } from 'playwright-core';
import WebSocket from 'ws';
import { CLI, cli, freePort, startBox } from './harness.mjs';

const CHROMIUM = process.env.CHROMIUM_PATH ?? '/usr/bin/chromium';
const UI_TIMEOUT = 60_000;
const here = dirname(fileURLToPath(import.meta.url));

const dir = mkdtempSync(join(tmpdir(), 'gpushards-oidc-'));
const accountsFile = join(dir, 'accounts.json');
let accounts = {
  alice: { email: 'alice@example.com', name: 'Alice', groups: ['ml-people'] },
  olga: { email: 'olga@example.com', name: 'Olga', groups: ['gpu-ops'] },
  bruno: { email: 'bruno@example.com', name: 'Bruno', groups: ['ml-people'] },
  carla: { email: 'carla@example.com', name: 'Carla', groups: ['ml-people'] },
};
const writeAccounts = () => writeFileSync(accountsFile, JSON.stringify(accounts));

let provider;
let issuer;
let box;
let browser;
let publicUrl;
/** A second box with the shortest sessions the settings allow, for expiry (started by its test). */
let shortUrl;

/** Starts the provider; resolves to its issuer URL once it serves. */
function startProvider(clientFile) {
  provider = spawn(process.execPath, [join(here, 'oidc-provider.mjs'), accountsFile, clientFile], {
    stdio: ['ignore', 'pipe', 'pipe'],
  });
  let output = '';
  return new Promise((resolve, reject) => {
    provider.stdout.on('data', (chunk) => {
      output += chunk;
      const issuer = /^issuer (\S+)$/m.exec(output)?.[1];
      if (issuer) resolve(issuer);
    });
    provider.stderr.on('data', (chunk) => (output += chunk));
    provider.on('exit', (code) => reject(new Error(`the provider exited ${code}: ${output}`)));
  });
}

const admin = () => ({
  GPUSHARDS_CONFIG: join(dir, 'none.json'),
  GPUSHARDS_URL: box.url,
  GPUSHARDS_TOKEN: box.adminToken,
});

async function must(args) {
  const result = await cli(args, { env: admin() });
  assert.equal(result.code, 0, `gpushards ${args.join(' ')}: ${result.stderr}`);
  return result;
}

/** Signs `login` in through the provider's pages in a new browser context; the portal's page. */
async function signIn(login, context, base = publicUrl) {
  const page = await (context ?? (await browser.newContext())).newPage();
  page.setDefaultTimeout(UI_TIMEOUT);
  await page.goto(base + '/');
  await page.getByRole('link', { name: 'Sign in with your organisation' }).click();
  // oidc-provider's development pages: its login form, then its consent.
  await page.locator('input[name="login"]').fill(login);
  await page.locator('input[name="password"]').fill('any');
  await page.locator('button[type="submit"]').click();
  await page.locator('button[type="submit"]').click();
  await page.getByTestId('who').waitFor();
  return page;
}

/** A shardEvents subscription signed in by the browser's cookie; how it ended. */
async function subscribeAs(page, base = publicUrl) {
  const cookies = await page.context().cookies(base);
  const cookie = cookies.map((c) => `${c.name}=${c.value}`).join('; ');
  let connected;
  const ready = new Promise((resolve) => (connected = resolve));
  const client = createClient({
    url: base.replace(/^http/, 'ws') + '/graphql',
    retryAttempts: 0,
    lazy: false,
    on: { connected: () => connected() },
    webSocketImpl: class extends WebSocket {
      constructor(address, protocols) {
        super(address, protocols, { headers: { cookie, origin: base } });
      }
    },
  });
  const ended = new Promise((resolve) => {
    client.subscribe(
      { query: 'subscription { shardEvents { kind } }' },
      {
        next: () => undefined,
        error: (error) => resolve(`closed ${error?.code}`),
        complete: () => resolve('complete'),
      },
    );
  }).finally(() => void client.dispose());
  return { connected: ready, ended };
}

before(async () => {
  writeAccounts();
  const port = await freePort();
  publicUrl = `http://127.0.0.1:${port}`;
  shortUrl = `http://127.0.0.1:${await freePort()}`;
  const clientFile = join(dir, 'client.json');
  writeFileSync(
    clientFile,
    JSON.stringify({
      client_id: 'gpushards',
      client_secret: 'test-client-secret',
      redirect_uris: [`${publicUrl}/auth/oidc/callback`, `${shortUrl}/auth/oidc/callback`],
      post_logout_redirect_uris: [`${publicUrl}/`, `${shortUrl}/`],
      backchannel_logout_uri: `${publicUrl}/auth/oidc/backchannel-logout`,
    }),
  );
  issuer = await startProvider(clientFile);
  box = await startBox({
    port,
    env: {
      GPUSHARDS_OIDC_ISSUER: issuer,
      GPUSHARDS_OIDC_CLIENT_ID: 'gpushards',
      GPUSHARDS_OIDC_CLIENT_SECRET: 'test-client-secret',
      GPUSHARDS_PUBLIC_URL: publicUrl,
      GPUSHARDS_OIDC_RECHECK_SECONDS: '1',
    },
  });
  browser = await chromium.launch({
    executablePath: CHROMIUM,
    args: ['--no-sandbox', '--disable-dev-shm-usage', '--disable-gpu'],
  });
  await must(['teams', 'create', 'ml']);
  await must(['teams', 'create', 'infra']);
  await must(['groups', 'set', 'ml-people', '--team', 'ml']);
  await must(['groups', 'set', 'infra-people', '--team', 'infra', '--role', 'VIEWER']);
  await must(['groups', 'set', 'gpu-ops', '--admin']);
});

after(async () => {
  await browser?.close();
  await box?.stop();
  provider?.kill('SIGTERM');
  rmSync(dir, { recursive: true, force: true });
});

describe('sign-in through the test provider', { timeout: 360_000 }, () => {
  it('a person sees exactly the team their groups give; the audit names them', async () => {
    const page = await signIn('alice');
    assert.equal(await page.getByTestId('who').innerText(), 'alice@example.com · MEMBER · ml');
    assert.equal(await page.getByLabel('Act as').count(), 0, 'one team: nothing to switch');
    await page.getByRole('link', { name: 'ml' }).waitFor();
    const groups = await must(['groups', '--json']);
    assert.deepEqual(groups.json.map((g) => g.group).sort(), [
      'gpu-ops',
      'infra-people',
      'ml-people',
    ]);
    await page.context().close();
  });

  it('a group added at the provider reaches her access at the next sign-in', async () => {
    accounts = { ...accounts, alice: { ...accounts.alice, groups: ['ml-people', 'infra-people'] } };
    writeAccounts();
    const page = await signIn('alice');
    const actAs = page.getByLabel('Act as');
    await actAs.waitFor();
    const options = await actAs.locator('option').allInnerTexts();
    assert.deepEqual(options.sort(), ['infra (VIEWER)', 'ml (MEMBER)']);
    await actAs.selectOption({ label: 'infra (VIEWER)' });
    await page.getByTestId('who').filter({ hasText: 'VIEWER · infra' }).waitFor();
    await page.context().close();
  });

  it('an admin group makes an admin, who sees the mapping on the Sign-in page', async () => {
    const page = await signIn('olga');
    assert.equal(await page.getByTestId('who').innerText(), 'olga@example.com · ADMIN');
    await page.getByRole('link', { name: 'Sign-in' }).click();
    await page.locator('tr[data-group="ml-people"]').waitFor();
    await page.context().close();
  });

  it('sign-out ends the session: its open subscription ends and the cookie is refused', async () => {
    const page = await signIn('alice');
    const cookies = await page.context().cookies(publicUrl);
    const subscription = await subscribeAs(page);
    await subscription.connected;
    await page.getByRole('button', { name: 'Sign out' }).click();
    assert.equal(await subscription.ended, 'complete');
    const stale = await fetch(`${publicUrl}/graphql`, {
      method: 'POST',
      headers: {
        'content-type': 'application/json',
        cookie: cookies.map((c) => `${c.name}=${c.value}`).join('; '),
      },
      body: JSON.stringify({ query: '{ me { id } }' }),
    });
    assert.equal((await stale.json()).errors?.[0]?.extensions?.code, 'UNAUTHENTICATED');
    await page.context().close();
  });

  it('the provider refusing the session (the person disabled there) ends it, also on an open subscription', async () => {
    const page = await signIn('alice');
    const subscription = await subscribeAs(page);
    await subscription.connected;
    accounts = { ...accounts, alice: { ...accounts.alice, disabled: true } };
    writeAccounts();
    // The next recheck (every second here) is refused by the provider: invalid_grant.
    assert.equal(await subscription.ended, 'complete');
    await page.reload();
    await page.getByRole('link', { name: 'Sign in with your organisation' }).waitFor();
    const audit = await must(['whoami']);
    assert.equal(audit.code, 0);
    await page.context().close();
  });
  it('signing out at the provider ends the session here through the back channel, also on an open subscription', async () => {
    const page = await signIn('bruno');
    const cookies = await page.context().cookies(publicUrl);
    const subscription = await subscribeAs(page);
    await subscription.connected;
    // Not through the portal: the provider's own sign-out page, in the same browser.
    await page.goto(`${issuer}/session/end`);
    await page.getByRole('button', { name: 'Yes, sign me out' }).click();
    // The provider posts a logout token with the session's sid; the session ends here.
    assert.equal(await subscription.ended, 'complete');
    const stale = await fetch(`${publicUrl}/graphql`, {
      method: 'POST',
      headers: {
        'content-type': 'application/json',
        cookie: cookies.map((c) => `${c.name}=${c.value}`).join('; '),
      },
      body: JSON.stringify({ query: '{ me { id } }' }),
    });
    assert.equal((await stale.json()).errors?.[0]?.extensions?.code, 'UNAUTHENTICATED');
    const metrics = await (await fetch(`${publicUrl}/metrics`)).text();
    assert.match(metrics, /gpushards_backchannel_logouts_total\{outcome="ended"\} 1/);
    assert.match(metrics, /gpushards_sessions_ended_total\{reason="provider_logout"\} 1/);
    assert.match(metrics, /gpushards_sign_ins_total\{outcome="success"\} [1-9]/);
    await page.context().close();
  });

  it('a logout token not signed by the provider ends nothing', async () => {
    const page = await signIn('bruno');
    const { privateKey } = await generateKeyPair('RS256');
    const forged = await new SignJWT({
      sub: 'bruno',
      events: { 'http://schemas.openid.net/event/backchannel-logout': {} },
    })
      .setProtectedHeader({ alg: 'RS256', kid: 'not-the-providers', typ: 'logout+jwt' })
      .setIssuer(issuer)
      .setAudience('gpushards')
      .setIssuedAt()
      .setJti('forged-1')
      .sign(privateKey);
    const answer = await fetch(`${publicUrl}/auth/oidc/backchannel-logout`, {
      method: 'POST',
      headers: { 'content-type': 'application/x-www-form-urlencoded' },
      body: new URLSearchParams({ logout_token: forged }).toString(),
    });
    assert.equal(answer.status, 400);
    assert.equal((await answer.json()).error, 'invalid_request');
    await page.reload();
    await page.getByTestId('who').waitFor();
    assert.equal(await page.getByTestId('who').innerText(), 'bruno@example.com · MEMBER · ml');
    await page.context().close();
  });
  it('a person signs the CLI in through the provider (a device code); the CLI then acts as her until she signs out', async () => {
    const config = join(dir, 'carla-cli.json');
    const login = spawn(process.execPath, [CLI, 'login', '--sso', '--url', publicUrl], {
      env: { ...process.env, GPUSHARDS_CONFIG: config },
      stdio: ['ignore', 'pipe', 'pipe'],
    });
    let stdout = '';
    let stderr = '';
    login.stdout.on('data', (chunk) => (stdout += chunk));
    const exited = new Promise((resolve) => login.on('close', resolve));
    const verification = await new Promise((resolve, reject) => {
      login.stderr.on('data', (chunk) => {
        stderr += chunk;
        const url = /open (\S+)/.exec(stderr)?.[1];
        if (url) resolve(url);
      });
      login.on('close', (code) => reject(new Error(`login --sso exited ${code}: ${stderr}`)));
    });
    // On the provider's page, as on a phone: confirm the code, sign in, consent.
    const page = await (await browser.newContext()).newPage();
    page.setDefaultTimeout(UI_TIMEOUT);
    await page.goto(verification);
    await page.getByRole('button', { name: 'Continue' }).click();
    await page.locator('input[name="login"]').fill('carla');
    await page.locator('input[name="password"]').fill('any');
    await page.locator('button[type="submit"]').click();
    await page.locator('button[type="submit"]').click();
    await page.getByText('Sign-in Success').waitFor();
    assert.equal(await exited, 0, stderr);
    assert.match(stdout, /signed in to .* as carla@example\.com \(MEMBER of ml\)/);
    const saved = JSON.parse(readFileSync(config, 'utf8'));
    assert.match(saved.token, /^gpss_/, 'a session, stored like a token');
    const whoami = await cli(['whoami', '--json'], { env: { GPUSHARDS_CONFIG: config } });
    assert.equal(whoami.code, 0, whoami.stderr);
    assert.deepEqual([whoami.json.name, whoami.json.role], ['carla@example.com', 'MEMBER']);
    // Signing out of the CLI ends the session on the control plane.
    assert.equal((await cli(['logout'], { env: { GPUSHARDS_CONFIG: config } })).code, 0);
    const stale = await fetch(`${publicUrl}/graphql`, {
      method: 'POST',
      headers: { 'content-type': 'application/json', authorization: `Session ${saved.token}` },
      body: JSON.stringify({ query: '{ me { id } }' }),
    });
    assert.equal((await stale.json()).errors?.[0]?.extensions?.code, 'UNAUTHENTICATED');
    await page.context().close();
  });
  it('an expired session is refused, also on an open subscription', async () => {
    // GPUSHARDS_SESSION_SECONDS' least (60 s): the subscription's end is the condition waited for.
    const short = await startBox({
      port: Number(new URL(shortUrl).port),
      env: {
        GPUSHARDS_OIDC_ISSUER: issuer,
        GPUSHARDS_OIDC_CLIENT_ID: 'gpushards',
        GPUSHARDS_OIDC_CLIENT_SECRET: 'test-client-secret',
        GPUSHARDS_PUBLIC_URL: shortUrl,
        GPUSHARDS_SESSION_SECONDS: '60',
        GPUSHARDS_OIDC_RECHECK_SECONDS: '30',
      },
    });
    try {
      const env = {
        GPUSHARDS_CONFIG: join(dir, 'none.json'),
        GPUSHARDS_URL: short.url,
        GPUSHARDS_TOKEN: short.adminToken,
      };
      for (const args of [
        ['teams', 'create', 'ml'],
        ['groups', 'set', 'ml-people', '--team', 'ml'],
      ]) {
        const result = await cli(args, { env });
        assert.equal(result.code, 0, result.stderr);
      }
      const page = await signIn('carla', undefined, shortUrl);
      const cookies = await page.context().cookies(shortUrl);
      const subscription = await subscribeAs(page, shortUrl);
      await subscription.connected;
      assert.equal(await subscription.ended, 'complete', 'the subscription ends at the expiry');
      const stale = await fetch(`${shortUrl}/graphql`, {
        method: 'POST',
        headers: {
          'content-type': 'application/json',
          cookie: cookies.map((c) => `${c.name}=${c.value}`).join('; '),
        },
        body: JSON.stringify({ query: '{ me { id } }' }),
      });
      assert.equal((await stale.json()).errors?.[0]?.extensions?.code, 'UNAUTHENTICATED');
      await page.reload();
      await page.getByRole('link', { name: 'Sign in with your organisation' }).waitFor();
      await page.context().close();
    } finally {
      await short.stop();
    }
  });
});
