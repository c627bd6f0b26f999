/* global document, getComputedStyle */
// The portal without a mouse, and the admin's tokens page, in Chromium (Debian's package, driven
// by playwright-core) against one real control plane (npm start: PGlite, simulated GPUs, the
// in-process agent, Docker). Screenshots go to test-results/; UPDATE_SCREENSHOTS=1 also writes
// docs/images/.
import assert from 'node:assert/strict';
import { mkdirSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, before, describe, it } from 'node:test';
import { chromium } from 'playwright-core';
import { cli, IMAGE, REPO_ROOT, startBox } from './harness.mjs';

const CHROMIUM = process.env.CHROMIUM_PATH ?? '/usr/bin/chromium';
const SHOTS = join(REPO_ROOT, 'apps/portal/test-results');
const UI_TIMEOUT = 60_000;

let box;
let browser;
let memberToken;
/** The CLI's environment with `token`, and no config file of the user's. */
const as = (token) => ({
  GPUSHARDS_CONFIG: join(tmpdir(), 'gpushards-kb-none.json'),
  GPUSHARDS_URL: box.url,
  GPUSHARDS_TOKEN: token,
});

async function shot(page, name) {
  mkdirSync(SHOTS, { recursive: true });
  await page.screenshot({ path: join(SHOTS, `${name}.png`) });
  if (process.env.UPDATE_SCREENSHOTS === '1') {
    await page.screenshot({ path: join(REPO_ROOT, 'docs/images', `${name}.png`) });
  }
}

async function newPage() {
  const context = await browser.newContext({ viewport: { width: 1280, height: 860 } });
  const page = await context.newPage();
  page.setDefaultTimeout(UI_TIMEOUT);
  await page.goto(box.url + '/');
  return page;
}

/** Is `locator`'s element the focused one, with the focus ring drawn? */
function focusState(locator) {
  return locator.evaluate((el) => ({
    focused: el === document.activeElement,
    visible: el.matches(':focus-visible') && getComputedStyle(el).outlineStyle !== 'none',
  }));
}

/** Presses Tab until `locator` has the focus (it must, within `max` presses), ring visible. */
async function tabTo(page, locator, what, max = 60) {
  await locator.waitFor();
  for (let presses = 0; presses < max; presses += 1) {
    await page.keyboard.press('Tab');
    const state = await focusState(locator);
    if (state.focused) {
      assert.ok(state.visible, `${what} has the focus but no visible focus ring`);
      return;
    }
  }
  assert.fail(`${what} was not reached with ${max} presses of Tab`);
}

before(async () => {
  box = await startBox();
  for (const args of [
    ['teams', 'create', 'kb'],
    [
      'teams',
      'set-quota',
      'kb',
      '--max-total',
      '16g',
      '--max-per-shard',
      '8g',
      '--max-shards',
      '4',
    ],
  ]) {
    const done = await cli(args, { env: as(box.adminToken) });
    assert.equal(done.code, 0, done.stderr);
  }
  browser = await chromium.launch({
    executablePath: CHROMIUM,
    args: ['--no-sandbox', '--disable-dev-shm-usage', '--disable-gpu'],
  });
});

after(async () => {
  await browser?.close();
  await box?.stop();
});

describe('the admin tokens page', { timeout: 120_000 }, () => {
  it('lists fleet-wide and team tokens, shows a new secret once, revokes', async () => {
    const page = await newPage();
    await page.fill('#token', box.adminToken);
    await page.keyboard.press('Enter');
    await page.getByRole('link', { name: 'Tokens' }).click();
    await page.getByRole('heading', { name: 'Tokens', level: 1 }).waitFor();
    await page.locator('tr[data-token="bootstrap admin"]').waitFor();

    const form = page.getByRole('form', { name: 'New token' });
    const secrets = {};
    for (const name of ['alice', 'bob']) {
      await form.getByLabel('Name').fill(name);
      await form.getByLabel('Role').selectOption('MEMBER');
      await form.getByLabel('Team').selectOption({ label: 'kb' });
      await form.getByRole('button', { name: 'Create token' }).click();
      const secret = page.getByTestId('secret');
      await secret.waitFor();
      const text = (await secret.innerText()).trim();
      assert.match(text, /^gps_/);
      secrets[name] = text;
      await page.getByRole('button', { name: 'Done' }).click();
      assert.equal(await secret.count(), 0, 'the secret is gone once dismissed');
      const row = page.locator(`tr[data-token="${name}"]`);
      await row.waitFor();
      assert.match(await row.innerText(), /MEMBER\s+kb/);
    }
    assert.match(await page.locator('tr[data-token="bootstrap admin"]').innerText(), /ADMIN\s+—/);

    page.once('dialog', (dialog) => void dialog.accept());
    await page.locator('tr[data-token="bob"]').getByRole('button', { name: 'Revoke' }).click();
    await page.locator('tr[data-token="bob"]').waitFor({ state: 'detached' });
    await page.getByLabel('Show revoked').check();
    const revoked = page.locator('tr[data-token="bob"][data-revoked="yes"]');
    await revoked.waitFor();
    assert.match(await revoked.innerText(), /MEMBER\s+kb[\s\S]*revoked \d+[sm] ago/);
    assert.equal(await revoked.getByRole('button', { name: 'Revoke' }).count(), 0);
    assert.equal(
      await page.locator('tr[data-token="alice"]').getByRole('button', { name: 'Revoke' }).count(),
      1,
      'live tokens keep their Revoke button',
    );
    await page.getByLabel('Show revoked').uncheck();
    await revoked.waitFor({ state: 'detached' });
    await page.getByLabel('Show revoked').check();
    await revoked.waitFor();
    await shot(page, 'portal-tokens');
    const asBob = await cli(['whoami'], { env: as(secrets.bob) });
    assert.equal(asBob.code, 3, 'the revoked token is refused');
    const asAlice = await cli(['whoami', '--json'], { env: as(secrets.alice) });
    assert.equal(asAlice.code, 0, asAlice.stderr);
    assert.equal(asAlice.json.team.name, 'kb');
    memberToken = secrets.alice;
    await page.context().close();
  });
});

describe('the portal from the keyboard alone', { timeout: 180_000 }, () => {
  it('signs in, creates a shard, resizes, stops and deletes it, focus always visible', async () => {
    assert.ok(memberToken, 'the tokens test made a member token');
    const page = await newPage();
    const token = page.locator('#token');
    assert.equal((await focusState(token)).focused, true, 'the token field has the focus');
    await page.keyboard.type(memberToken);
    await tabTo(page, page.getByRole('button', { name: 'Sign in' }), 'Sign in');
    await page.keyboard.press('Enter');
    await page.getByRole('heading', { name: 'Team kb' }).waitFor();

    const form = page.getByRole('form', { name: 'New shard' });
    await tabTo(page, form.getByLabel('Name'), 'the Name field');
    await page.keyboard.type('kb-probe');
    await page.keyboard.press('Tab');
    assert.equal((await focusState(form.getByLabel('Image'))).focused, true);
    await page.keyboard.type(IMAGE);
    await page.keyboard.press('Tab');
    assert.equal((await focusState(form.getByLabel('Memory per GPU'))).focused, true);
    await page.keyboard.type('1g');
    await page.getByTestId('preview').getByText('Would go on').waitFor();
    await tabTo(page, form.getByRole('button', { name: 'Create' }), 'Create');
    await page.keyboard.press('Enter');
    const running = page.locator('tr[data-shard="kb-probe"][data-state="RUNNING"]');
    await running.waitFor();

    await tabTo(page, running.getByRole('button', { name: 'Resize' }), 'Resize');
    await page.keyboard.press('Enter');
    const resize = page.getByRole('form', { name: 'Resize kb-probe' });
    assert.equal((await focusState(resize.getByRole('textbox'))).focused, true);
    await page.keyboard.type('2g');
    await page.keyboard.press('Enter');
    await page.locator('tr[data-shard="kb-probe"][data-memory="2 GiB"]').waitFor();

    const row = page.locator('tr[data-shard="kb-probe"]');
    await tabTo(page, row.getByRole('button', { name: 'Stop' }), 'Stop');
    await page.keyboard.press('Enter');
    const stopped = page.locator(
      'tr[data-shard="kb-probe"][data-state="STOPPED"], tr[data-shard="kb-probe"][data-state="EXITED"]',
    );
    await stopped.waitFor();

    page.once('dialog', (dialog) => void dialog.accept());
    await tabTo(page, stopped.getByRole('button', { name: 'Delete' }), 'Delete');
    await page.keyboard.press('Enter');
    await page.locator('tr[data-shard="kb-probe"]').waitFor({ state: 'detached' });
    await tabTo(page, page.getByRole('button', { name: 'Sign out' }), 'Sign out');
    await page.keyboard.press('Enter');
    await page.locator('#token').waitFor();
    await page.context().close();
  });
});
