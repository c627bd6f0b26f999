// Isolated compute (an MPS partition of its own, docs/agent.md "MPS partition") in the gpushards
// CLI and the portal, against one real control plane (npm start: PGlite, simulated GPUs, the
// in-process agent, Docker). The one box runs no MPS partition, so the API refuses an isolated
// shard there: the CLI exits 6 with its message, the portal shows it.
import assert from 'node:assert/strict';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, before, describe, it } from 'node:test';
import { chromium } from 'playwright-core';
import { cli, IMAGE, startBox } from './harness.mjs';

const CHROMIUM = process.env.CHROMIUM_PATH ?? '/usr/bin/chromium';
const UI_TIMEOUT = 60_000;

let box;
let browser;
let memberToken;
/** The CLI's environment with `token`, and no config file of the user's. */
const as = (token) => ({
  GPUSHARDS_CONFIG: join(tmpdir(), 'gpushards-isolated-none.json'),
  GPUSHARDS_URL: box.url,
  GPUSHARDS_TOKEN: token,
});

async function signIn(token) {
  const context = await browser.newContext({ viewport: { width: 1280, height: 860 } });
  const page = await context.newPage();
  page.setDefaultTimeout(UI_TIMEOUT);
  await page.goto(box.url + '/');
  await page.fill('#token', token);
  await page.keyboard.press('Enter');
  return page;
}

before(async () => {
  box = await startBox();
  browser = await chromium.launch({
    executablePath: CHROMIUM,
    args: ['--no-sandbox', '--disable-dev-shm-usage', '--disable-gpu'],
  });
  const admin = as(box.adminToken);
  const team = await cli(['teams', 'create', 'latency', '--json'], { env: admin });
  assert.equal(team.code, 0, team.stderr);
  // Room enough that only the missing partition refuses an isolated shard.
  const quota = await cli(
    ['teams', 'set-quota', 'latency', '--max-total', '8g', '--max-per-shard', '4g'].concat([
      '--max-shards',
      '4',
    ]),
    { env: admin },
  );
  assert.equal(quota.code, 0, quota.stderr);
  const token = await cli(['tokens', 'create', 'lena', '--team', 'latency', '--json'], {
    env: admin,
  });
  assert.equal(token.code, 0, token.stderr);
  memberToken = token.json.secret;
});

after(async () => {
  await browser?.close();
  await box?.stop();
});

describe('gpushards CLI: --compute-mode isolated', () => {
  it('parses with a share, and the API refuses it on a box without an MPS partition: exit 6', async () => {
    const preview = await cli(
      ['preview', '-m', '1g', '--compute', '30', '--compute-mode', 'isolated'],
      { env: as(memberToken) },
    );
    assert.equal(preview.code, 6, preview.stderr);
    assert.match(preview.stdout, /^does not fit: /);
    assert.doesNotMatch(preview.stdout, /quota would refuse/);
    assert.match(
      preview.stdout,
      /runs no isolated \(MPS\) partition, which an ISOLATED shard needs/,
    );

    const created = await cli(
      ['shards', 'create', 'lat', '-i', IMAGE, '-m', '1g', '--compute', '30'].concat([
        '--compute-mode',
        'ISOLATED',
        '--json',
      ]),
      { env: as(memberToken) },
    );
    assert.equal(created.code, 6, created.stdout);
    const error = JSON.parse(created.stderr).error;
    assert.equal(error.code, 'NO_CAPACITY');
    assert.match(error.message, /runs no isolated \(MPS\) partition/);
    const listed = await cli(['shards', 'ls', '--json'], { env: as(memberToken) });
    assert.deepEqual(listed.json, [], 'nothing was made');
  });

  it('refuses isolated without a share, and an unknown mode, before asking the API: exit 2', async () => {
    const without = await cli(
      ['shards', 'create', 'lat', '-i', IMAGE, '-m', '1g', '--compute-mode', 'isolated'],
      { env: as(memberToken) },
    );
    assert.equal(without.code, 2);
    assert.match(without.stderr, /--compute-mode isolated needs a share/);
    const unknown = await cli(['preview', '-m', '1g', '--compute', '30', '--compute-mode', 'mps'], {
      env: as(memberToken),
    });
    assert.equal(unknown.code, 2);
    assert.match(unknown.stderr, /"mps" is not a mode: guaranteed, capped or isolated/);
  });

  it('says what isolated means wherever --compute-mode is; hosts shows the partition', async () => {
    for (const command of [['shards', 'create'], ['preview'], ['shards', 'set-compute']]) {
      const help = await cli([...command, '--help']);
      assert.equal(help.code, 0);
      assert.match(
        help.stdout.replace(/\s+/g, ' '),
        /isolated \((its share of the SMs in )?an MPS partition of its own, on hosts that run one/,
        command.join(' '),
      );
    }
    const exitCodes = await cli(['--help']);
    assert.match(exitCodes.stdout, /an isolated share where no\s+host runs an MPS partition/);
    const hosts = await cli(['hosts'], { env: as(box.adminToken) });
    assert.equal(hosts.code, 0, hosts.stderr);
    assert.match(hosts.stdout, /\bISOLATED\b/);
    assert.match(hosts.stdout, /\bCOMPUTE\b[\s\S]*0% guaranteed/);
    assert.doesNotMatch(hosts.stdout, /of a \d+% partition/, 'the box runs none');
    const json = await cli(['hosts', '--json'], { env: as(box.adminToken) });
    assert.equal(json.json[0].computeIsolatedPoolPercent, 0);
    assert.equal(json.json[0].gpus[0].computeIsolatedPercent, 0);
  });
});

describe('the portal: Isolated compute mode', { timeout: 120_000 }, () => {
  it("offers Isolated with a hint; on this box the preview and createShard show the API's refusal", async () => {
    const page = await signIn(memberToken);
    await page.getByRole('heading', { name: 'Team latency' }).waitFor();
    const form = page.getByRole('form', { name: 'New shard' });
    const mode = form.getByLabel('Compute mode');
    const options = await mode.locator('option').evaluateAll((all) => all.map((o) => o.value));
    assert.deepEqual(options, ['GUARANTEED', 'CAPPED', 'ISOLATED']);
    await form.getByLabel('Name').fill('lat-portal');
    await form.getByLabel('Image').fill(IMAGE);
    await form.getByLabel('Memory per GPU').fill('1g');
    await mode.selectOption('ISOLATED');
    assert.match(
      await page.getByTestId('mode-help').innerText(),
      /MPS partition of its own, only on hosts that run one/,
    );
    assert.match(await form.innerText(), /isolated needs a share/);
    assert.equal(await form.getByRole('button', { name: 'Create' }).isDisabled(), true);
    await form.getByLabel('Compute share').fill('30');
    const refusal = page
      .getByTestId('preview')
      .getByText(/runs no isolated \(MPS\) partition, which an ISOLATED shard needs/)
      .first();
    await refusal.waitFor();
    await form.getByRole('button', { name: 'Create' }).click();
    const alert = page.getByRole('alert').filter({ hasText: /runs no isolated \(MPS\) partition/ });
    await alert.first().waitFor();
    assert.equal(await page.locator('tr[data-shard="lat-portal"]').count(), 0, 'nothing made');
    await page.context().close();
  });

  it("the Fleet page shows each GPU's compute, and no partition on this box", async () => {
    const page = await signIn(box.adminToken);
    await page.getByRole('link', { name: 'Fleet' }).click();
    const compute = page.getByTestId('gpu-compute').first();
    await compute.waitFor();
    assert.equal(await compute.innerText(), 'compute 0% guaranteed');
    assert.equal(await page.getByTestId('isolated-pool').count(), 0);
    await page.context().close();
  });
});
