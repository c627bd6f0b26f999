// Elastic memory as a user tries it on the one box (npm start: PGlite, simulated GPUs through the
// fake driver, the in-process agent, Docker; docs/elastic.md): the CLI creates an elastic shard,
// suspends it and resumes it with --wait (its memory in host RAM, then back, in the same
// container), a suspend past the host's budget is refused, an admin sets a host's overcommit
// ratio; the portal creates an elastic shard, shows its moves with their progress (held midway by
// the fake driver's move gate), suspends and resumes it with its buttons, and shows the
// suspended GiB-hours, the ratio and the team's quota; a team without allowElastic is refused.
import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, before, describe, it } from 'node:test';
import { chromium } from 'playwright-core';
import { cli, IMAGE, startBox } from './harness.mjs';

const CHROMIUM = process.env.CHROMIUM_PATH ?? '/usr/bin/chromium';
const UI_TIMEOUT = 60_000;
// The host RAM the box's agent lets suspended shards take: one small shard's cap and a bit, so
// that a second one past it is refused (NOT_SUSPENDABLE).
const SUSPEND_BUDGET = '3g';

// The fake driver's move gate (docs/interposer.md): while the file holds 0, the agent's
// checkpoints and restores wait, so a move can be seen midway; no file, no wait.
const gateDir = mkdtempSync(join(tmpdir(), 'gpushards-gate-'));
const gate = join(gateDir, 'moves');
const holdMoves = () => writeFileSync(gate, '0\n');
const releaseMoves = () => rmSync(gate, { force: true });

let box;
let browser;
let member;
let hostId;
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
  box = await startBox({
    env: { GPUSHARDS_SUSPEND_BUDGET: SUSPEND_BUDGET, GPUSHARDS_FAKE_MOVE_GATE: gate },
  });
  browser = await chromium.launch({
    executablePath: CHROMIUM,
    args: ['--no-sandbox', '--disable-dev-shm-usage', '--disable-gpu'],
  });
  hostId = (await must(['hosts', '-q'], admin())).stdout.trim();
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
  // A move held by a failed test would hold the agent's stop too.
  releaseMoves();
  await browser?.close();
  await box?.stop();
  rmSync(gateDir, { recursive: true, force: true });
});

describe('elastic shards on the one box', { timeout: 300_000 }, () => {
  it("the box's agent suspends within GPUSHARDS_SUSPEND_BUDGET, and says so", () => {
    assert.match(
      box.output(),
      /elastic\s+suspended shards' GPU memory may take 3 GiB of host RAM \(GPUSHARDS_SUSPEND_BUDGET\)/,
    );
  });

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
    assert.match(suspended.stderr, /nb-1 SUSPENDING: moving to host RAM/, 'the move, as it went');
    assert.deepEqual(containersOf(id), [container], 'the container runs on');
    const shown = await must(['shards', 'show', 'nb-1'], as(member));
    assert.match(shown.stdout, /memory at\s+host RAM \(.+\), by suspend-requested \(elastic\)/);
    const listed = await must(['shards', 'ls'], as(member));
    assert.match(listed.stdout, /^NAME\s+STATE\s.*\sAGE\s+MEMORY\s+ID$/m);
    assert.match(listed.stdout, /^nb-1\s+SUSPENDED\s.*\shost RAM \(elastic\)\s+\S+$/m);
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

    const hourAgo = new Date(Date.now() - 3_600_000).toISOString();
    const usage = await must(['usage', '--from', hourAgo, '--csv'], as(member));
    const row = usage.stdout.split('\n').find((line) => line.includes(',nb-1,'));
    assert.ok(Number(row.split(',').at(-1)) > 0, `suspended GiB-hours counted: ${row}`);
  });

  it("a suspend past the host's budget is refused (NOT_SUSPENDABLE, exit 7), naming it", async () => {
    await must(['shards', 'suspend', 'nb-1', '--wait'], as(member));
    await must(
      ['shards', 'create', 'nb-2', '-i', IMAGE, '-m', '2g', '--elastic', '--wait'],
      as(member),
    );
    const refused = await cli(['shards', 'suspend', 'nb-2', '--wait'], { env: as(member) });
    assert.equal(refused.code, 7, refused.stderr);
    assert.match(refused.stderr, /host RAM for suspended shards is taken/);
    assert.match(refused.stderr, /GPUSHARDS_SUSPEND_BUDGET/);
    const shown = await must(['shards', 'show', 'nb-2', '--json'], as(member));
    assert.equal(shown.json.state, 'RUNNING', 'left as it was');
    // nb-1's cap (1 GiB and the context) in host RAM, of the 3 GiB budget.
    const hosts = await must(['hosts'], admin());
    assert.match(hosts.stdout, /\bFREE\s+SUSPENDED\s+ISOLATED\b/);
    assert.match(hosts.stdout, / 1(\.\d+)? GiB \/ 3 GiB /, hosts.stdout);
    await must(['shards', 'delete', 'nb-2'], as(member));
    await must(['shards', 'resume', 'nb-1', '--wait'], as(member));
  });

  it('an admin sets the idle policy to suspend and a host its overcommit ratio; not a member', async () => {
    const idle = await must(
      ['teams', 'set-idle-policy', 'notebooks', '--after', '10m', '--suspend-after', '30m'],
      admin(),
    );
    assert.match(idle.stdout, /idle policy 10m, suspend elastic 30m/);

    const set = await must(['hosts', 'overcommit', hostId, '2'], admin());
    assert.equal(set.stdout, `${hostId}: 2 GPU(s) at ratio 2\n`);
    const hosts = await must(['hosts'], admin());
    assert.match(hosts.stdout, /\bCOMPUTE\s+OVERCOMMIT\n/);
    assert.equal(hosts.stdout.match(/ ×2\n/g)?.length, 2, hosts.stdout);
    const tooLow = await cli(['hosts', 'overcommit', hostId, '0.5'], { env: admin() });
    assert.equal(tooLow.code, 2, tooLow.stderr);
    assert.match(tooLow.stderr, /a number from 1/);
    const byMember = await cli(['hosts', 'overcommit', hostId, '3'], { env: as(member) });
    assert.equal(byMember.code, 4, byMember.stderr);
  });

  it('the portal creates an elastic shard, shows its moves with their progress, and suspends and resumes it', async () => {
    const page = await signIn(member);
    const form = page.getByRole('form', { name: 'New shard' });
    await form.getByLabel('Name').fill('nb-ui');
    await form.getByLabel('Image').fill(IMAGE);
    await form.getByLabel('Memory per GPU').fill('1g');
    await form.getByLabel('Elastic').check();
    await form.getByRole('button', { name: 'Create' }).click();
    const row = page.locator('tr[data-shard="nb-ui"]');
    await page.locator('tr[data-shard="nb-ui"][data-state="RUNNING"]').waitFor();
    assert.match(await row.locator('td').first().innerText(), /nb-ui\s*elastic/);

    holdMoves();
    await row.getByRole('button', { name: 'Suspend' }).click();
    const suspending = page.locator('tr[data-shard="nb-ui"][data-state="SUSPENDING"]');
    await suspending.getByRole('progressbar', { name: 'nb-ui: 0% of its memory moved' }).waitFor();
    assert.match(
      await suspending.getByTestId('memory-note').innerText(),
      /^moving to host RAM, 0 B of .+ \(suspended by its team\)$/,
    );
    assert.equal(await suspending.getByRole('button', { name: 'Suspend' }).count(), 0);
    releaseMoves();
    const suspended = page.locator('tr[data-shard="nb-ui"][data-state="SUSPENDED"]');
    await suspended.waitFor();
    assert.match(
      await suspended.getByTestId('memory-note').innerText(),
      /^in host RAM, .+ \(suspended by its team\)$/,
    );
    assert.equal(await suspended.getByRole('progressbar').count(), 0, 'no move under way');

    holdMoves();
    await suspended.getByRole('button', { name: 'Resume' }).click();
    const resuming = page.locator('tr[data-shard="nb-ui"][data-state="RESUMING"]');
    await resuming.getByRole('progressbar', { name: 'nb-ui: 0% of its memory moved' }).waitFor();
    assert.match(await resuming.getByTestId('memory-note').innerText(), /^moving back to the GPU/);
    assert.equal(await resuming.getByRole('button', { name: /Suspend|Resume/ }).count(), 0);
    releaseMoves();
    await page.locator('tr[data-shard="nb-ui"][data-state="RUNNING"]').waitFor();
    assert.equal(await row.getByTestId('memory-note').count(), 0, 'back on the GPU');

    const usage = page.getByRole('region', { name: 'Usage' });
    await usage.getByText(/GiB-hours reserved/).waitFor();
    assert.match(await usage.innerText(), /GiB-hours reserved, .+ used, .+ suspended in host RAM/);
    assert.match(
      await page.getByTestId('quota-terms').innerText(),
      /Shards may be elastic.*elastic ones are suspended to host RAM after 30m/,
    );
    await page.context().close();
  });

  it("the portal shows an admin each GPU's overcommit ratio and sets it; the team's quota form keeps allowElastic", async () => {
    const page = await signIn(box.adminToken);
    await page.getByRole('heading', { name: 'Fleet' }).waitFor();
    await page.getByTestId('gpu-overcommit').first().waitFor();
    assert.equal(
      await page
        .getByTestId('gpu-overcommit')
        .allInnerTexts()
        .then((t) => t.join('|')),
      ' · overcommit ×2| · overcommit ×2',
    );
    assert.match(
      await page.getByTestId('host-suspend-budget').innerText(),
      /^host RAM for suspended shards: .+ of 3 GiB$/,
    );
    const ratio = page.getByRole('form', { name: /^Overcommit of / });
    await ratio.getByLabel('Overcommit ratio').fill('0.5');
    assert.match(await ratio.innerText(), /a number from 1/);
    await ratio.getByLabel('Overcommit ratio').fill('3');
    await ratio.getByRole('button', { name: 'Set ratio' }).click();
    await ratio.getByRole('status').filter({ hasText: '2 GPU(s) at ×3' }).waitFor();
    const hosts = await must(['hosts'], admin());
    assert.equal(hosts.stdout.match(/ ×3\n/g)?.length, 2, hosts.stdout);

    await page.getByRole('link', { name: 'Teams' }).click();
    const team = page.locator('tr[data-team="notebooks"]');
    await team.waitFor();
    assert.match(await team.innerText(), /suspend elastic after 30m\s+yes/);
    await team.getByRole('button', { name: 'Set quota' }).click();
    const quota = page.getByRole('form', { name: 'Quota policy' });
    assert.equal(await quota.getByLabel('Elastic shards').isChecked(), true, 'as the team has it');
    assert.equal(await quota.getByLabel('Max total').inputValue(), '8g');
    await page.context().close();
  });
});
