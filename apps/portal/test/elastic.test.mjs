// Elastic memory as a user tries it on the one box (npm start: PGlite, simulated GPUs through the
// fake driver, the in-process agent, Docker; docs/elastic.md): the CLI creates an elastic shard,
// suspends it and resumes it with --wait (its memory in host RAM, then back, in the same
// container), the portal's Suspend and Resume buttons do the same, and a team without
// allowElastic is refused.
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
  GPUSHARDS_CONFIG: join(tmpdir(), 'gpushards-elastic-none.json'),
  GPUSHARDS_URL: box.url,
  GPUSHARDS_TOKEN: token,
});
const admin = () => as(box.adminToken);

async function must(args, env) {
  const result = await cli(args, { env });
  assert.equal(result.code, 0, `gpushards ${args.join(' ')}: ${result.stderr}`);
  return result;
}

function containersOf(shardId) {
  return spawnSync('docker', ['ps', '-q', '--filter', `label=io.gpushards.shard=${shardId}`], {
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
  await must(['teams', 'create', 'notebooks'], admin());
  const quota = ['--max-total', '8g', '--max-per-shard', '4g', '--max-shards', '4'];
  await must(['teams', 'set-quota', 'notebooks', ...quota], admin());
  member = (await must(['tokens', 'create', 'nb', '--team', 'notebooks', '--json'], admin())).json
    .secret;
  const refused = await cli(['shards', 'create', 'nb-0', '-i', IMAGE, '-m', '1g', '--elastic'], {
    env: as(member),
  });
  assert.equal(refused.code, 6, `no allowElastic: refused (exit 6): ${refused.stderr}`);
  assert.match(refused.stderr, /allowElastic/);
  await must(['teams', 'set-quota', 'notebooks', ...quota, '--allow-elastic'], admin());
});

after(async () => {
  await browser?.close();
  await box?.stop();
});

describe('elastic shards on the one box', { timeout: 240_000 }, () => {
  it('the CLI suspends an elastic shard to host RAM and resumes it, in the same container', async () => {
    const created = await must(
      ['shards', 'create', 'nb-1', '-i', IMAGE, '-m', '1g', '--elastic', '--wait', '--json'],
      as(member),
    );
    const id = created.json.id;
    assert.equal(created.json.elastic, true);
    const [container] = containersOf(id);
    assert.ok(container, 'a running container');

    const suspended = await must(['shards', 'suspend', 'nb-1', '--wait', '--json'], as(member));
    assert.equal(suspended.json.state, 'SUSPENDED');
    assert.equal(suspended.json.memory.where, 'HOST');
    assert.equal(suspended.json.memory.suspendCause, 'suspend-requested');
    assert.ok(Number(suspended.json.memory.moved.bytes) > 0, 'it moved its memory');
    assert.deepEqual(containersOf(id), [container], 'the container runs on');
    const shown = await must(['shards', 'show', 'nb-1'], as(member));
    assert.match(shown.stdout, /memory at\s+host RAM \(.+\), by suspend-requested \(elastic\)/);
    const again = await must(['shards', 'suspend', 'nb-1'], as(member));
    assert.match(again.stdout, /SUSPENDED: memory host RAM/, 'a second suspend changes nothing');
    const resize = await cli(['shards', 'resize', 'nb-1', '2g'], { env: as(member) });
    assert.equal(resize.code, 7, 'resize waits for a resume (CONFLICT)');
    assert.match(resize.stderr, /resume it first/);

    const resumed = await must(['shards', 'resume', 'nb-1', '--wait', '--json'], as(member));
    assert.equal(resumed.json.state, 'RUNNING');
    assert.equal(resumed.json.memory.where, 'GPU');
    assert.deepEqual(containersOf(id), [container], 'the same container, never restarted');
    const notSuspended = await cli(['shards', 'resume', 'nb-1'], { env: as(member) });
    assert.equal(notSuspended.code, 0, 'running already: unchanged');
  });

  it('the portal shows Suspend on a running shard and Resume once its memory is in host RAM', async () => {
    const context = await browser.newContext({ viewport: { width: 1280, height: 860 } });
    const page = await context.newPage();
    page.setDefaultTimeout(UI_TIMEOUT);
    await page.goto(box.url + '/');
    await page.fill('#token', member);
    await page.keyboard.press('Enter');
    const running = page.locator('tr[data-shard="nb-1"][data-state="RUNNING"]');
    await running.getByRole('button', { name: 'Suspend' }).click();
    const suspended = page.locator('tr[data-shard="nb-1"][data-state="SUSPENDED"]');
    await suspended.waitFor();
    assert.match(
      await suspended.getByTestId('memory-note').innerText(),
      /in host RAM.*suspended by its team/,
    );
    await suspended.getByRole('button', { name: 'Resume' }).click();
    await page.locator('tr[data-shard="nb-1"][data-state="RUNNING"]').waitFor();
    await context.close();
  });
});
