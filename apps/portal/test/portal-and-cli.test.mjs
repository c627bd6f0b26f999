// The portal in Chromium (Debian's package, driven by playwright-core) and the gpushards CLI as
// processes, against one real control plane (npm start: PGlite, simulated GPUs, the in-process
// agent, Docker). Screenshots go to test-results/; UPDATE_SCREENSHOTS=1 also writes docs/.
import assert from 'node:assert/strict';
import { mkdirSync, mkdtempSync, readFileSync, statSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, before, describe, it } from 'node:test';
import { chromium } from 'playwright-core';
import { spawnSync } from 'node:child_process';
import { cli, CLI, cliStream, IMAGE, REPO_ROOT, startBox } from './harness.mjs';
import { docsFiles, readmeDocs, readmeOutputs, tableHeaders } from './readme.mjs';

const CHROMIUM = process.env.CHROMIUM_PATH ?? '/usr/bin/chromium';
const SHOTS = join(REPO_ROOT, 'apps/portal/test-results');
const UI_TIMEOUT = 60_000;

let box;
let browser;
let memberToken;
const configDir = mkdtempSync(join(tmpdir(), 'gpushards-cli-'));
const adminEnv = () => ({ GPUSHARDS_CONFIG: join(configDir, 'config.json') });
const memberEnv = () => ({
  GPUSHARDS_CONFIG: join(configDir, 'none.json'),
  GPUSHARDS_URL: box.url,
  GPUSHARDS_TOKEN: memberToken,
});

async function shot(page, name) {
  mkdirSync(SHOTS, { recursive: true });
  await page.screenshot({ path: join(SHOTS, `${name}.png`) });
  if (process.env.UPDATE_SCREENSHOTS === '1') {
    await page.screenshot({ path: join(REPO_ROOT, 'docs/images', `${name}.png`) });
  }
}

async function signIn(token) {
  const context = await browser.newContext({
    acceptDownloads: true,
    viewport: { width: 1280, height: 860 },
  });
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
});

after(async () => {
  await browser?.close();
  await box?.stop();
});

describe('gpushards CLI as an admin', () => {
  it('login stores the URL and token in the config folder, mode 0600', async () => {
    const login = await cli(['login', '--url', box.url, '--token', '-'], {
      env: adminEnv(),
      input: box.adminToken,
    });
    assert.equal(login.code, 0, login.stderr);
    const path = join(configDir, 'config.json');
    assert.equal(statSync(path).mode & 0o777, 0o600);
    assert.deepEqual(JSON.parse(readFileSync(path, 'utf8')), {
      url: box.url,
      token: box.adminToken,
    });
    const me = await cli(['whoami', '--json'], { env: adminEnv() });
    assert.equal(me.code, 0, me.stderr);
    assert.equal(me.json.role, 'ADMIN');
  });

  it('teams create, set-quota and tokens create (secret once) for a member', async () => {
    const team = await cli(['teams', 'create', 'demo', '--json'], { env: adminEnv() });
    assert.equal(team.code, 0, team.stderr);
    assert.equal(team.json.name, 'demo');
    const quota = await cli(
      [
        'teams',
        'set-quota',
        'demo',
        '--max-total',
        '16g',
        '--max-per-shard',
        '8g',
        '--max-shards',
        '4',
        '--max-compute-share',
        '50',
        '--json',
      ],
      { env: adminEnv() },
    );
    assert.equal(quota.code, 0, quota.stderr);
    assert.equal(quota.json.quotaPolicy.maxTotal.bytes, String(16 * 2 ** 30));
    assert.equal(quota.json.quotaPolicy.maxComputeSharePercent, 50);
    const token = await cli(['tokens', 'create', 'alice', '--team', 'demo', '--json'], {
      env: adminEnv(),
    });
    assert.equal(token.code, 0, token.stderr);
    memberToken = token.json.secret;
    assert.match(memberToken, /^gps_/);
    const teams = await cli(['teams', '--json'], { env: adminEnv() });
    assert.ok(teams.json.some((t) => t.name === 'demo'));
    const tokens = await cli(['tokens', 'ls', '--team', 'demo', '--json'], { env: adminEnv() });
    assert.ok(tokens.json.some((t) => t.name === 'alice' && t.role === 'MEMBER'));
    const hosts = await cli(['hosts', '--json'], { env: adminEnv() });
    assert.equal(hosts.code, 0, hosts.stderr);
    assert.equal(hosts.json[0].gpus.length, 2);
  });

  it('preview says where a shard would go, and exits 6 when quota would refuse it', async () => {
    const fits = await cli(['preview', '-m', '1g', '--team', 'demo', '--json'], {
      env: adminEnv(),
    });
    assert.equal(fits.code, 0, fits.stderr);
    assert.equal(fits.json.fits, true);
    const hostId = readFileSync(join(box.dataDir, 'host-id'), 'utf8').trim();
    const said = await cli(['preview', '-m', '1g', '--team', 'demo', '--compute', '25'], {
      env: adminEnv(),
    });
    assert.equal(said.code, 0, said.stderr);
    assert.equal(
      said.stdout,
      `fits on ${hostId}, reserving 1.29 GiB per GPU and 25% guaranteed of its compute\n`,
      'the host by its id, as hosts and shards ls show it',
    );
    const overBound = await cli(['preview', '-m', '1g', '--team', 'demo', '--compute', '60'], {
      env: adminEnv(),
    });
    assert.equal(overBound.code, 6);
    assert.match(overBound.stdout, /quota would refuse it: .*60%.*50%/);
    const tooBig = await cli(['preview', '-m', '6g', '-g', '2', '--team', 'demo'], {
      env: adminEnv(),
    });
    assert.equal(tooBig.code, 6);
    assert.match(tooBig.stdout, /quota would refuse it: .*8 GiB/);
  });

  it('an idle policy, and a capped shard that launches no kernel (listed idle at the end)', async () => {
    const tooShort = await cli(['teams', 'set-idle-policy', 'demo', '--after', '30s'], {
      env: adminEnv(),
    });
    assert.equal(tooShort.code, 2, 'the API refuses less than a minute');
    assert.match(tooShort.stderr, /idleAfterSeconds: .*from 60/);
    const notADuration = await cli(['teams', 'set-idle-policy', 'demo', '--after', '30 min'], {
      env: adminEnv(),
    });
    assert.equal(notADuration.code, 2);
    assert.match(notADuration.stderr, /--after: "30 min" is not a duration/);
    const policy = await cli(
      ['teams', 'set-idle-policy', 'demo', '--after', '1m', '--stop-after', '2h', '--json'],
      { env: adminEnv() },
    );
    assert.equal(policy.code, 0, policy.stderr);
    assert.deepEqual(policy.json.idlePolicy, {
      idleAfterSeconds: 60,
      stopAfterSeconds: 7200,
      suspendAfterSeconds: null,
    });
    const idler = await cli(
      [
        'shards',
        'create',
        'idler',
        '-i',
        IMAGE,
        '-m',
        '1g',
        '--team',
        'demo',
        '--compute',
        '25',
        '--compute-mode',
        'capped',
        '--wait',
        '--json',
      ],
      { env: adminEnv() },
    );
    assert.equal(idler.code, 0, idler.stderr);
    assert.equal(idler.json.state, 'RUNNING');
    assert.equal(idler.json.computeSharePercent, 25);
    assert.equal(idler.json.computeMode, 'CAPPED');
  });
});

describe('the portal in Chromium', { timeout: 120_000 }, () => {
  it('a bad token gets a clear message on the sign-in page', async () => {
    const page = await signIn('gps_not-a-real-token');
    const alert = page.getByRole('alert');
    await alert.waitFor();
    assert.match(await alert.innerText(), /token was refused[\s\S]*invalid token/i);
    assert.equal(await page.evaluate(() => localStorage.length), 0, 'nothing in localStorage');
    await page.context().close();
  });

  it('a member creates a shard and sees it reach RUNNING without reloading, then exports usage', async () => {
    const page = await signIn(memberToken);
    await page.getByRole('heading', { name: 'Team demo' }).waitFor();
    const form = page.getByRole('form', { name: 'New shard' });
    await form.getByLabel('Name').fill('web-probe');
    await form.getByLabel('Image').fill(IMAGE);
    await form.getByLabel('Memory per GPU').fill('12gb');
    assert.match(await form.innerText(), /ambiguous/);
    await form.getByLabel('Memory per GPU').fill('1g');
    await page.getByTestId('preview').getByText('Would go on').waitFor();
    await form.getByLabel('Compute share').fill('60');
    await page
      .getByTestId('preview')
      .getByText(/Quota would refuse it: .*60%.*50%/)
      .waitFor();
    await form.getByLabel('Compute mode').selectOption('CAPPED');
    await form.getByLabel('Compute share').fill('');
    assert.match(await form.innerText(), /capped needs a share/);
    assert.equal(await form.getByRole('button', { name: 'Create' }).isDisabled(), true);
    await form.getByLabel('Compute share').fill('25');
    const hostId = readFileSync(join(box.dataDir, 'host-id'), 'utf8').trim();
    const preview = page
      .getByTestId('preview')
      .getByText(/Would go on .*25% capped of its compute/);
    await preview.waitFor();
    assert.match(await preview.innerText(), new RegExp(`Would go on ${hostId},`));
    let navigations = 0;
    page.on('framenavigated', () => (navigations += 1));
    await form.getByRole('button', { name: 'Create' }).click();
    const running = page.locator('tr[data-shard="web-probe"][data-state="RUNNING"]');
    await running.waitFor();
    assert.equal(navigations, 0, 'the page was not reloaded');
    assert.equal(await running.getAttribute('data-compute'), '25% capped');
    assert.match(await running.innerText(), new RegExp(`${hostId}[\\s\\S]*25% capped`));
    // idler (25% of one GPU) and web-probe (25% of one): half a GPU of the two held.
    const gauge = page.getByRole('meter', { name: 'Compute' });
    await page
      .locator('[role="meter"][aria-label="Compute"][aria-valuetext^="0.5 of 2 GPU(s) guaranteed"]')
      .waitFor();
    assert.match(await page.getByTestId('quota-terms').innerText(), /compute share up to 50%/);
    assert.equal(await gauge.getAttribute('aria-valuemax'), '2');
    await running.getByRole('button', { name: 'Compute' }).click();
    const change = page.getByRole('form', { name: 'Compute share of web-probe' });
    await change.getByRole('textbox').fill('40');
    await change.getByLabel('Mode').selectOption('GUARANTEED');
    await change.getByRole('button', { name: 'Apply' }).click();
    await page.locator('tr[data-shard="web-probe"][data-compute="40% guaranteed"]').waitFor();
    assert.equal(
      await page.evaluate(() => localStorage.length),
      0,
      'the token is not in localStorage',
    );
    await shot(page, 'portal-team');

    // Export needs the report: wait for it by name, so that a report that never came fails here
    // and says so, not as a download that never started.
    await page
      .getByRole('region', { name: 'Usage' })
      .getByText(/GiB-hours reserved/)
      .waitFor();
    const [download] = await Promise.all([
      page.waitForEvent('download'),
      page.getByRole('button', { name: 'Export CSV' }).click(),
    ]);
    const csv = readFileSync(await download.path(), 'utf8');
    const today = new Date().toISOString().slice(0, 10);
    assert.match(
      csv,
      /^team,day,reserved_gib_hours,used_gib_hours,peak_used_bytes,suspended_gib_hours\r\n/,
    );
    assert.match(csv, new RegExp(`\\r\\ndemo,${today},[0-9.e-]+,[0-9.e-]+,\\d+,0\\r\\n$`));

    await page.goto(box.url + '/#/fleet');
    const refused = page.getByRole('alert');
    await refused.waitFor();
    assert.match(await refused.innerText(), /Admins only/);
    assert.equal(await page.getByRole('heading', { name: 'Fleet' }).count(), 0);
    await page.context().close();
  });

  it('an admin sees the shard in the fleet picture', async () => {
    const page = await signIn(box.adminToken);
    await page.getByRole('heading', { name: 'Fleet' }).waitFor();
    await page.locator('.host-shards li[data-shard="web-probe"]').waitFor();
    const bar = page.locator('.gpu .bar').first();
    assert.match((await bar.getAttribute('aria-label')) ?? '', /demo \d/);
    await page.getByRole('link', { name: 'Teams' }).click();
    const demo = page.locator('tr[data-team="demo"]');
    await demo.waitFor();
    assert.match(await demo.innerText(), /up to 50%\s+report after 1m, stop after 2h/);
    await demo.getByRole('button', { name: 'Idle policy' }).click();
    const idleForm = page.getByRole('form', { name: 'Idle policy of demo' });
    await idleForm.getByLabel('Report idle after').fill('1 minute');
    assert.match(await idleForm.innerText(), /"1 minute" is not a duration/);
    await idleForm.getByLabel('Report idle after').fill('1m');
    await idleForm.getByLabel('Stop after').fill('');
    await idleForm.getByRole('button', { name: 'Save idle policy' }).click();
    // hasText reads textContent: the cell alone, so "report after 1m" is all of it.
    await page.locator('tr[data-team="demo"] td', { hasText: /^report after 1m$/ }).waitFor();
    assert.doesNotMatch(await demo.innerText(), /stop after/);
    await page.context().close();
  });

  it('the member stops the shard from the table and sees it stop', async () => {
    const page = await signIn(memberToken);
    const row = page.locator('tr[data-shard="web-probe"]');
    await row.getByRole('button', { name: 'Stop' }).click();
    await page
      .locator(
        'tr[data-shard="web-probe"][data-state="STOPPED"], tr[data-shard="web-probe"][data-state="EXITED"]',
      )
      .waitFor();
    await page.context().close();
  });
});

describe('gpushards CLI as a member', () => {
  it(
    'shards create --wait, ls, show, resize, stop --wait, wait, rm; top follows the events',
    { timeout: 180_000 },
    async () => {
      const top = cliStream(['top', '--json'], memberEnv());
      await top.ready;
      try {
        const created = await cli(
          [
            'shards',
            'create',
            'cli-probe',
            '-i',
            IMAGE,
            '-m',
            '1g',
            '--compute',
            '20%',
            '--wait',
            '--json',
          ],
          { env: memberEnv() },
        );
        assert.equal(created.code, 0, created.stderr);
        assert.equal(created.json.state, 'RUNNING');
        assert.equal(created.json.computeSharePercent, 20);
        assert.equal(created.json.computeMode, 'GUARANTEED');
        const seen = JSON.parse(
          await top.next(
            (line) => /"name":"cli-probe"[\s\S]*/.test(line) && line.includes('"state":"RUNNING"'),
          ),
        );
        assert.equal(seen.shard.team.name, 'demo');
      } finally {
        await top.stop();
      }
      const ls = await cli(['shards', 'ls', '--json'], { env: memberEnv() });
      assert.equal(ls.code, 0, ls.stderr);
      assert.ok(ls.json.some((s) => s.name === 'cli-probe' && s.state === 'RUNNING'));
      const table = await cli(['shards', 'ls'], { env: memberEnv() });
      assert.match(
        table.stdout,
        /^NAME\s+STATE\s+TEAM\s+HOST\s+GPUS\s+CAP\/GPU\s+USED\s+COMPUTE\s+BUSY\s+IDLE\s+AGE/m,
      );
      assert.match(table.stdout, /cli-probe\s+RUNNING\s+demo\s.*\s20% guaranteed\s/);
      assert.match(table.stdout, /idler\s+RUNNING\s+demo\s.*\s25% capped\s/);
      assert.match(
        table.stdout,
        /^cli-probe\s+RUNNING\s+demo\s+\S+\s+1 \(#[01]\)\s/m,
        'GPUS: how many, and which it holds',
      );
      assert.doesNotMatch(table.stdout, / +$/m, 'no line of the table ends with spaces');
      const id = ls.json.find((s) => s.name === 'cli-probe').id;
      const quiet = await cli(['shards', 'show', 'cli-probe', '-q'], { env: memberEnv() });
      assert.equal(quiet.code, 0, quiet.stderr);
      assert.equal(quiet.stdout, `${id}\n`, 'the id alone, for $(...)');
      const ids = await cli(['shards', 'ls', '--quiet'], { env: memberEnv() });
      assert.deepEqual(
        ids.stdout
          .split('\n')
          .filter((line) => line !== '')
          .sort(),
        ls.json.map((s) => s.id).sort(),
      );
      const hostIds = await cli(['hosts', '-q'], { env: adminEnv() });
      assert.equal(
        hostIds.stdout,
        `${readFileSync(join(box.dataDir, 'host-id'), 'utf8').trim()}\n`,
      );
      const quietJson = await cli(['shards', 'ls', '-q', '--json'], { env: memberEnv() });
      assert.equal(quietJson.code, 2);
      assert.equal(JSON.parse(quietJson.stderr).error.message, '--quiet and --json: choose one');
      const show = await cli(['shards', 'show', 'cli-probe', '--json'], { env: memberEnv() });
      assert.equal(show.json.memoryPerGpu.human, '1 GiB');
      const overBound = await cli(['shards', 'set-compute', 'cli-probe', '60'], {
        env: memberEnv(),
      });
      assert.equal(overBound.code, 6, 'over the team bound of 50%');
      assert.match(overBound.stderr, /60% is over the team's limit of 50%/);
      const capped = await cli(
        ['shards', 'set-compute', 'cli-probe', '30', '--compute-mode', 'capped', '--json'],
        { env: memberEnv() },
      );
      assert.equal(capped.code, 0, capped.stderr);
      assert.equal(capped.json.computeSharePercent, 30);
      assert.equal(capped.json.computeMode, 'CAPPED');
      const described = await cli(['shards', 'show', 'cli-probe'], { env: memberEnv() });
      assert.match(described.stdout, /^compute {5}30% capped of each GPU$/m);
      assert.match(described.stdout, /^GPU\s+MODEL\s+RESERVED\s+USED\s+REAL\s+BUSY\s+LAST KERNEL/m);
      const resized = await cli(['shards', 'resize', 'cli-probe', '2g', '--json'], {
        env: memberEnv(),
      });
      assert.equal(resized.code, 0, resized.stderr);
      assert.equal(resized.json.memoryPerGpu.human, '2 GiB');
      const quota = await cli(['quota', '--json'], { env: memberEnv() });
      assert.equal(quota.code, 0, quota.stderr);
      assert.ok(quota.json.usage.shardCount >= 1);
      // idler (25%) and cli-probe (30%) share the first GPU (binpack): half of each of the two
      // GPUs fits the fleet, but not now. It waits in the queue.
      const onGpu = async (name) =>
        (await cli(['shards', 'show', name, '--json'], { env: memberEnv() })).json.gpus[0].gpuUuid;
      assert.equal(await onGpu('idler'), await onGpu('cli-probe'), 'both on one GPU');
      const queued = await cli(
        ['shards', 'create', 'cli-queued', '-i', IMAGE, '-m', '1g', '-g', '2', '--compute', '50'],
        { env: memberEnv() },
      );
      assert.equal(queued.code, 0, queued.stderr);
      assert.match(queued.stdout, /^cli-queued PENDING\b.*\([0-9a-f-]{36}\)$/m);
      let waiting;
      do {
        waiting = await cli(['shards', 'show', 'cli-queued', '--json'], { env: memberEnv() });
        assert.equal(waiting.json.state, 'PENDING');
      } while (waiting.json.queuePosition === null);
      assert.equal(waiting.json.queuePosition, 1);
      const explained = await cli(['shards', 'show', 'cli-queued'], { env: memberEnv() });
      assert.match(explained.stdout, /^queue {7}position 1: no host has room for it now/m);
      assert.match(explained.stdout, /^starts {6}(no estimate|in about|any moment)/m);
      // The team's page shows it waiting too.
      const page = await signIn(memberToken);
      const note = page.locator('tr[data-shard="cli-queued"] [data-testid="queue-note"]');
      await note.waitFor();
      assert.match(await note.innerText(), /^#1 in the queue/);
      assert.match((await note.getAttribute('title')) ?? '', /no host has room for it now/);
      await page.context().close();
      const refused = await cli(
        [
          'shards',
          'create',
          'cli-now',
          '-i',
          IMAGE,
          '-m',
          '1g',
          '-g',
          '2',
          '--compute',
          '50',
          '--no-queue',
        ],
        { env: memberEnv() },
      );
      assert.equal(refused.code, 6, 'no room now, and told not to wait');
      assert.match(refused.stderr, /NO_CAPACITY|no host/i);
      const cancelled = await cli(['shards', 'rm', 'cli-queued', '--json'], { env: memberEnv() });
      assert.equal(cancelled.json.state, 'DELETED', 'deleting a waiting shard cancels it');
      const stopped = await cli(
        ['shards', 'stop', 'cli-probe', '--grace', '2', '--wait', '--json'],
        {
          env: memberEnv(),
        },
      );
      assert.equal(stopped.code, 0, stopped.stderr);
      assert.ok(['STOPPED', 'EXITED'].includes(stopped.json.state));
      const waited = await cli(
        ['shards', 'wait', 'cli-probe', '--for', 'STOPPED,EXITED', '--json'],
        {
          env: memberEnv(),
        },
      );
      assert.equal(waited.code, 0, waited.stderr);
      const notRunning = await cli(['shards', 'wait', 'cli-probe', '--timeout', '5'], {
        env: memberEnv(),
      });
      assert.equal(notRunning.code, 9, 'a stopped shard will not reach RUNNING');
      const removed = await cli(['shards', 'rm', 'cli-probe', '--json'], { env: memberEnv() });
      assert.equal(removed.json.state, 'DELETED');
      const all = await cli(['shards', 'ls', '--all'], { env: memberEnv() });
      assert.match(all.stdout, /^cli-probe\s+DELETED\s+demo\s+\S+\s+1\s{2,}\d/m, 'how many it had');
      const usage = await cli(['usage', '--from', new Date().toISOString().slice(0, 10), '--csv'], {
        env: memberEnv(),
      });
      assert.equal(usage.code, 0, usage.stderr);
      assert.match(
        usage.stdout,
        /^shard_id,shard_name,host,reserved_gib_hours,used_gib_hours,peak_used_bytes,suspended_gib_hours\n/,
      );
      assert.match(usage.stdout, /,cli-probe,/);
    },
  );

  it('exit codes: bad size 2, bad token 3, member on admin command 4, not found 5, quota 6', async () => {
    const badSize = await cli(['shards', 'create', 'x', '-i', IMAGE, '-m', '12gb'], {
      env: memberEnv(),
    });
    assert.equal(badSize.code, 2);
    assert.match(badSize.stderr, /--memory: .*12g/);
    const badToken = await cli(['shards', 'ls'], {
      env: { ...memberEnv(), GPUSHARDS_TOKEN: 'gps_nope' },
    });
    assert.equal(badToken.code, 3);
    assert.match(badToken.stderr, /invalid token/);
    const jsonError = await cli(['shards', 'ls', '--json'], {
      env: { ...memberEnv(), GPUSHARDS_TOKEN: 'gps_nope' },
    });
    assert.equal(JSON.parse(jsonError.stderr).error.code, 'UNAUTHENTICATED');
    const forbidden = await cli(['teams', 'create', 'mine'], { env: memberEnv() });
    assert.equal(forbidden.code, 4, forbidden.stderr);
    const missing = await cli(['shards', 'show', 'no-such-shard'], { env: memberEnv() });
    assert.equal(missing.code, 5);
    const tooBig = await cli(['shards', 'create', 'big', '-i', IMAGE, '-m', '9g'], {
      env: memberEnv(),
    });
    assert.equal(tooBig.code, 6);
    assert.match(tooBig.stderr, /9 GiB > limit 8 GiB/);
    const badShare = await cli(
      ['shards', 'create', 'x', '-i', IMAGE, '-m', '1g', '--compute', '150'],
      {
        env: memberEnv(),
      },
    );
    assert.equal(badShare.code, 2);
    assert.match(badShare.stderr, /--compute: "150" is not a share/);
    const cappedWithout = await cli(
      ['shards', 'create', 'x', '-i', IMAGE, '-m', '1g', '--compute-mode', 'capped', '--json'],
      { env: memberEnv() },
    );
    assert.equal(cappedWithout.code, 2);
    assert.equal(JSON.parse(cappedWithout.stderr).error.code, 'BAD_USER_INPUT');
    const overBound = await cli(
      ['shards', 'create', 'x', '-i', IMAGE, '-m', '1g', '--compute', '60'],
      {
        env: memberEnv(),
      },
    );
    assert.equal(overBound.code, 6);
    const unknown = await cli(['shards', 'explode'], { env: memberEnv() });
    assert.equal(unknown.code, 2);
    const notLoggedIn = await cli(['shards', 'ls'], {
      env: { GPUSHARDS_CONFIG: join(configDir, 'none.json') },
    });
    assert.equal(notLoggedIn.code, 3);
    assert.match(notLoggedIn.stderr, /gpushards login/);
  });

  it('--help has examples and the exit codes; completion is a bash script', async () => {
    const help = await cli(['--help']);
    assert.equal(help.code, 0);
    assert.match(help.stdout, /Exit codes:[\s\S]*6 {2}refused/);
    const sub = await cli(['shards', 'create', '--help']);
    assert.match(sub.stdout, /Examples:\n {2}\$ gpushards shards create/);
    assert.match(sub.stdout, /--compute-mode capped/);
    for (const command of [
      ['shards', 'set-compute'],
      ['shards', 'idle'],
      ['teams', 'set-idle-policy'],
    ]) {
      const help = await cli([...command, '--help']);
      assert.equal(help.code, 0);
      assert.match(help.stdout, new RegExp(`Examples:\\n {2}\\$ gpushards ${command.join(' ')}`));
    }
    const completion = await cli(['completion', 'bash']);
    assert.match(completion.stdout, /^complete -F _gpushards gpushards$/m);
    assert.match(completion.stdout, /^complete -o default -F _gpushards_npx npx$/m);
    for (const [, list] of completion.stdout.matchAll(/words="([^"]*)"/g)) {
      const words = list.split(' ');
      assert.equal(new Set(words).size, words.length, `a word twice in "${list}"`);
    }
    // What bash offers with the script loaded, for the function each command is registered with.
    const offered = (complete, ...words) =>
      spawnSync(
        'bash',
        [
          '-c',
          `eval "$(node '${CLI}' completion bash)"; COMP_WORDS=(${words.join(' ')}); ` +
            `COMP_CWORD=${words.length - 1}; ${complete}; echo "\${COMPREPLY[*]}"`,
        ],
        { encoding: 'utf8' },
      ).stdout.trim();
    assert.equal(offered('_gpushards', 'gpushards', 'sh'), 'shards shard');
    assert.equal(offered('_gpushards_npx', 'npx', 'gpushards', 'sh'), 'shards shard');
    assert.equal(offered('_gpushards_npx', 'npx', 'gpushards', 'shards', 'ls', '--q'), '--quiet');
    assert.equal(offered('_gpushards_npx', 'npx', 'gp'), 'gpushards');
    assert.equal(offered('_gpushards_npx', 'npx', 'prettier', '--c'), '', 'not ours: left alone');
  });

  it('a mistyped subcommand gets the suggestion and the pointer to --help, as a mistyped command does', async () => {
    for (const args of [
      ['shrads', 'ls'],
      ['shard', 'lss'],
    ]) {
      const typo = await cli(args);
      assert.equal(typo.code, 2);
      assert.match(typo.stderr, /\(Did you mean (shards|ls)\?\)\n\(add --help for usage\)\n$/);
    }
  });
});

describe('the API explorer in Chromium', () => {
  it('without a token it says that listing the schema needs one and takes it here; a refused one says why', async () => {
    const context = await browser.newContext();
    const page = await context.newPage();
    page.setDefaultTimeout(UI_TIMEOUT);
    await page.goto(box.url + '/explorer');
    const schema = page.locator('#schema');
    await schema.getByText(/Listing the schema \(introspection\) needs a token/).waitFor();
    await page.fill('#schema-token-input', box.adminToken);
    await page.getByRole('button', { name: 'Load schema', exact: true }).click();
    await schema.locator('summary', { hasText: /^Query \(object\)$/ }).waitFor();
    assert.equal(await page.inputValue('#token'), box.adminToken, 'the token field has it too');
    await page.fill('#token', 'gps_not-a-real-token');
    await page.click('#reload');
    await schema.getByText(/^The token was refused: .*invalid token/i).waitFor();
    await context.close();
  });
});

describe('idle shards', { timeout: 240_000 }, () => {
  it('the idle policy reports the shard that launches no kernel: the admin portal and the CLI list it', async () => {
    const page = await signIn(box.adminToken);
    await page.getByRole('heading', { name: 'Fleet' }).waitFor();
    // Reported once it launched no kernel for the policy's minute, at the next 15 s sweep.
    const idler = page.locator('tr[data-idle-shard="idler"]');
    await idler.waitFor({ timeout: 180_000 });
    assert.match(
      await idler.innerText(),
      /demo\/idler\s+\S+\s+\d+[sm]\s+1\.29 GiB on 1 GPU\(s\)\s+25% capped\s+0%/,
    );
    await shot(page, 'portal-fleet');
    await page.context().close();

    const asAdmin = await cli(['shards', 'idle', '--json'], { env: adminEnv() });
    assert.equal(asAdmin.code, 0, asAdmin.stderr);
    const listed = asAdmin.json.find((s) => s.name === 'idler');
    assert.ok(listed, 'idler is listed idle');
    assert.ok(listed.idleSince, 'with the time it went idle');
    assert.equal(listed.gpus[0].busyRatio, 0, 'its host reports it: no GPU time held');
    const asMember = await cli(['shards', 'idle'], { env: memberEnv() });
    assert.equal(asMember.code, 0, asMember.stderr);
    assert.match(asMember.stdout, /^NAME\s+TEAM\s+HOST\s+IDLE FOR/m);
    assert.match(asMember.stdout, /^idler\s+demo\s/m);
    assert.doesNotMatch(asMember.stdout, / +$/m, 'no line of the table ends with spaces');
    const shown = await cli(['shards', 'show', 'idler'], { env: memberEnv() });
    assert.match(
      shown.stdout,
      /^activity {4}busy 0%, no kernel for \d+[sm] \(reported idle since /m,
    );
  });

  it("the member's Shards view shows the idle notice from the stored history, and again after a reload", async () => {
    // The IDLE event was sent before this page existed: only the stored history can show it.
    const page = await signIn(memberToken);
    const notices = page.getByRole('list', { name: 'Shard notices' });
    const idle = notices.getByRole('listitem').filter({ hasText: /idler/ });
    await idle.waitFor();
    assert.match(
      await idle.innerText(),
      /idler: idle: no kernel on any of its GPUs for .+: reported/,
    );
    await page.reload();
    await page.getByRole('heading', { name: 'Team demo' }).waitFor();
    await idle.waitFor();
    assert.equal(await idle.count(), 1, 'shown once');
    assert.match(
      await idle.innerText(),
      /idler: idle: no kernel on any of its GPUs for .+: reported/,
    );
    await page.context().close();

    const events = await cli(['shards', 'events', 'idler', '--kind', 'idle', '--json'], {
      env: memberEnv(),
    });
    assert.equal(events.code, 0, events.stderr);
    assert.deepEqual(
      events.json.map((e) => [e.kind, e.state, e.idle.action]),
      [['IDLE', 'RUNNING', 'REPORT']],
    );
    const all = await cli(['shards', 'events', 'idler'], { env: memberEnv() });
    assert.equal(all.code, 0, all.stderr);
    assert.match(all.stdout, /^AT\s+KIND\s+STATE\s+WHAT/m);
    assert.match(all.stdout, /\sIDLE\s+RUNNING\s+no kernel for \d+s: reported/);
    assert.match(all.stdout, /\sSTATE\s+STARTING -> RUNNING\s/);
    const badKind = await cli(['shards', 'events', 'idler', '--kind', 'loud'], {
      env: memberEnv(),
    });
    assert.equal(badKind.code, 2);
  });

  it("the README's Try it: its tables are the ones the CLI prints, ids whole; its docs list has every doc", async () => {
    const printed = new Set();
    for (const [args, env] of [
      [['hosts'], adminEnv()],
      [['shards', 'ls'], memberEnv()],
      [['quota'], memberEnv()],
      [['shards', 'idle'], memberEnv()],
    ]) {
      const run = await cli(args, { env });
      assert.equal(run.code, 0, run.stderr);
      for (const header of tableHeaders(run.stdout)) printed.add(header);
    }
    const shown = new Set(readmeOutputs().flatMap((block) => [...tableHeaders(block)]));
    assert.deepEqual([...shown].sort(), [...printed].sort());
    for (const block of readmeOutputs()) {
      assert.doesNotMatch(block, /[0-9a-f]{8}-…/, 'an id cut short, which the CLI never prints');
    }
    assert.deepEqual([...readmeDocs()].sort(), [...docsFiles()].sort());
  });
});
