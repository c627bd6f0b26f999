// The lifecycle as a user tries it, against one real control plane (npm start: PGlite, simulated
// GPUs, the in-process agent, Docker): a stopped shard started again from the portal and the CLI
// (the same container name runs again), a team renamed, archived and deleted (drained first) from
// the portal and the CLI, and the box's host drained and removed with the CLI.
import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, before, describe, it } from 'node:test';
import { chromium } from 'playwright-core';
import { cli, IMAGE, startBox } from './harness.mjs';

const CHROMIUM = process.env.CHROMIUM_PATH ?? '/usr/bin/chromium';
const UI_TIMEOUT = 60_000;

let box;
let browser;
let member;
const as = (token) => ({
  GPUSHARDS_CONFIG: join(tmpdir(), 'gpushards-lifecycle-none.json'),
  GPUSHARDS_URL: box.url,
  GPUSHARDS_TOKEN: token,
});
const admin = () => as(box.adminToken);

async function must(args, env) {
  const result = await cli(args, { env });
  assert.equal(result.code, 0, `gpushards ${args.join(' ')}: ${result.stderr}`);
  return result;
}

async function signIn(token) {
  const context = await browser.newContext({ viewport: { width: 1280, height: 860 } });
  const page = await context.newPage();
  page.setDefaultTimeout(UI_TIMEOUT);
  await page.goto(box.url + '/');
  await page.fill('#token', token);
  await page.keyboard.press('Enter');
  return page;
}

/** The ids of the containers Docker has for the shard. */
function containersOf(shardId) {
  return spawnSync('docker', ['ps', '-aq', '--filter', `label=io.gpushards.shard=${shardId}`], {
    encoding: 'utf8',
  })
    .stdout.trim()
    .split('\n')
    .filter(Boolean);
}

before(async () => {
  box = await startBox();
  browser = await chromium.launch({
    executablePath: CHROMIUM,
    args: ['--no-sandbox', '--disable-dev-shm-usage', '--disable-gpu'],
  });
  await must(['teams', 'create', 'life'], admin());
  await must(
    [
      'teams',
      'set-quota',
      'life',
      '--max-total',
      '8g',
      '--max-per-shard',
      '4g',
      '--max-shards',
      '4',
    ],
    admin(),
  );
  member = (await must(['tokens', 'create', 'lifer', '--team', 'life', '--json'], admin())).json
    .secret;
});

after(async () => {
  await browser?.close();
  await box?.stop();
});

describe('shards start', { timeout: 240_000 }, () => {
  it('the CLI starts a stopped shard again: same id and name, RUNNING in a new container', async () => {
    const created = await must(
      ['shards', 'create', 'again', '-i', IMAGE, '-m', '1g', '--wait', '--json'],
      as(member),
    );
    const id = created.json.id;
    await must(['shards', 'stop', 'again', '--grace', '1', '--wait'], as(member));
    const first = containersOf(id);
    assert.equal(first.length, 1, 'the stopped container is kept');
    const started = await must(['shards', 'start', 'again', '--wait', '--json'], as(member));
    assert.deepEqual({ id: started.json.id, state: started.json.state }, { id, state: 'RUNNING' });
    const now = containersOf(id);
    assert.equal(now.length, 1, 'one container per shard');
    assert.notEqual(now[0], first[0], 'a new container from the spec');
    const events = await must(['shards', 'events', 'again', '--json'], as(member));
    const states = events.json.map((e) => e.state).reverse();
    assert.deepEqual(
      states.filter((s) => s === 'STOPPED' || s === 'PENDING' || s === 'RUNNING'),
      ['RUNNING', 'STOPPED', 'PENDING', 'RUNNING'],
      'one history across both runs',
    );
    const notStopped = await cli(['shards', 'start', 'again'], { env: as(member) });
    assert.equal(notStopped.code, 0, 'running already: unchanged');
  });

  it('the portal offers Start on a stopped shard and it runs again without a reload', async () => {
    await must(['shards', 'stop', 'again', '--grace', '1', '--wait'], as(member));
    const page = await signIn(member);
    const row = page.locator('tr[data-shard="again"][data-state="STOPPED"]');
    await row.getByRole('button', { name: 'Start' }).click();
    await page.locator('tr[data-shard="again"][data-state="RUNNING"]').waitFor();
    await page.context().close();
    await must(['shards', 'stop', 'again', '--grace', '1', '--wait'], as(member));
  });
});

describe('teams rename, archive and delete', { timeout: 240_000 }, () => {
  it('the portal renames and archives a team: its member is refused, then unarchives it', async () => {
    const page = await signIn(box.adminToken);
    await page.getByRole('link', { name: 'Teams' }).click();
    await page.locator('tr[data-team="life"]').getByRole('button', { name: 'Manage' }).click();
    const manage = page.getByRole('group', { name: 'Manage life' });
    await manage.getByLabel('New name').fill('life-two');
    await manage.getByRole('button', { name: 'Rename' }).click();
    await page.locator('tr[data-team="life-two"]').waitFor();
    await page
      .getByRole('group', { name: 'Manage life-two' })
      .getByRole('button', { name: 'Archive' })
      .click();
    await page.locator('tr[data-team="life-two"][data-archived="true"]').waitFor();
    const refused = await cli(['whoami'], { env: as(member) });
    assert.equal(refused.code, 3, 'archived: its tokens are refused (exit 3)');
    assert.match(refused.stderr, /archived/);
    await page
      .getByRole('group', { name: 'Manage life-two' })
      .getByRole('button', { name: 'Unarchive' })
      .click();
    await page.locator('tr[data-team="life-two"][data-archived="false"]').waitFor();
    await must(['whoami'], as(member));
    await page.context().close();
  });

  it('the CLI deletes a team: refused with a live shard, then --drain stops it and deletes the team', async () => {
    await must(['shards', 'start', 'again', '--wait'], as(member));
    const refused = await cli(['teams', 'rm', 'life-two'], { env: admin() });
    assert.equal(refused.code, 7, `CONFLICT while a shard runs: ${refused.stderr}`);
    assert.match(refused.stderr, /live shard/);
    const deleted = await must(['teams', 'rm', 'life-two', '--drain', '--json'], admin());
    assert.deepEqual(
      { deleted: deleted.json.deleted, name: deleted.json.name },
      { deleted: true, name: 'life-two' },
    );
    const teams = await must(['teams', '--json'], admin());
    assert.ok(!teams.json.some((t) => t.name === 'life-two'));
    assert.equal((await cli(['whoami'], { env: as(member) })).code, 3, 'its tokens are revoked');
  });
});

describe('hosts remove', { timeout: 120_000 }, () => {
  it('the CLI refuses to remove a host before it is drained, then removes it: gone from hosts', async () => {
    const hosts = await must(['hosts', '--json'], admin());
    const hostId = hosts.json[0].id;
    const early = await cli(['hosts', 'remove', hostId], { env: admin() });
    assert.equal(early.code, 7, early.stderr);
    assert.match(early.stderr, /drain it first/);
    await must(['hosts', 'drain', hostId], admin());
    const removed = await must(['hosts', 'remove', hostId], admin());
    assert.equal(removed.stdout, `${hostId} removed\n`);
    const after = await must(['hosts', '--json'], admin());
    assert.ok(!after.json.some((h) => h.id === hostId));
  });
});
