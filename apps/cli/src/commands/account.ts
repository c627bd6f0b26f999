import { Command } from 'commander';
import { Api } from '../api.js';
import { configPath, removeLogin, saveLogin, storedLogin } from '../config.js';
import { CliError, EXIT } from '../exit-codes.js';
import { apiFor, examples, globals, teamIdFor, teamIdOrOwn } from '../context.js';
import { checkSize, csvField, isoTime, printJson, table } from '../output.js';
import { MeDocument, PreviewDocument, UsageByShardDocument } from '@gpushards/graphql-client';
import { computeInput, shareLabel, withComputeOptions } from '../compute.js';

export function loginCommand(): Command {
  return examples(
    new Command('login')
      .description(
        "check a token against a control plane and store both in your config folder (mode 0600); --sso signs you in through the organisation's provider instead",
      )
      .option(
        '--sso',
        "sign in as yourself through the organisation's OpenID Connect provider (a code to enter in a browser, on any device); your calls are then audited as you",
      )
      .addHelpText(
        'before',
        'Uses the global --url (default GPUSHARDS_URL, then http://127.0.0.1:4000) and --token\n' +
          '(default GPUSHARDS_TOKEN; "-" reads it from stdin).\n',
      )
      .action(async (own: { sso?: boolean }, command: Command) => {
        const options = globals(command);
        if (own.sso) return void (await signInWithProvider(command));
        let token = options.token ?? process.env['GPUSHARDS_TOKEN'];
        if (token === '-') token = (await readStdin()).trim();
        if (!token)
          throw new CliError('give --token gps_… (or --token - to read it from stdin)', EXIT.USAGE);
        const url = (options.url ?? process.env['GPUSHARDS_URL'] ?? 'http://127.0.0.1:4000')
          .replace(/\/+$/, '')
          .replace(/\/graphql$/, '');
        const me = await new Api({ url, token }).request(MeDocument);
        saveLogin({ url, token });
        if (globals(command).json) return printJson({ url, config: configPath(), me: me.me });
        process.stdout.write(
          `logged in to ${url} as ${me.me.name} (${me.me.role}${me.me.team ? ` of ${me.me.team.name}` : ''}); saved in ${configPath()}\n`,
        );
      }),
    [
      'gpushards login --url http://127.0.0.1:4000 --token "$(cat .gpushards/admin-token)"',
      'pass show gpushards | gpushards login --token -',
      'gpushards login --url https://gpus.example.com --sso',
    ],
  );
}

interface DeviceStart {
  userCode: string;
  verificationUri: string;
  verificationUriComplete: string | null;
  expiresIn: number;
  interval: number;
  handle: string;
}

/** POSTs JSON to the control plane's /auth/cli/… and reads its JSON answer, or fails clearly. */
async function postAuth<T>(
  url: string,
  path: string,
  body: unknown,
): Promise<{ status: number; body: T }> {
  let response: Response;
  try {
    response = await fetch(`${url}${path}`, {
      method: 'POST',
      headers: { 'content-type': 'application/json' },
      body: JSON.stringify(body),
    });
  } catch (error) {
    const cause = (error as { cause?: { code?: string } }).cause;
    throw new CliError(
      `cannot reach the control plane at ${url} (${cause?.code ?? (error as Error).message})`,
      EXIT.UNREACHABLE,
      'UNREACHABLE',
    );
  }
  if (response.status === 404) {
    throw new CliError(
      `${url} has no sign-in through a provider (GPUSHARDS_OIDC_* unset there): log in with a token`,
      EXIT.USAGE,
    );
  }
  return { status: response.status, body: (await response.json()) as T };
}

/**
 * `login --sso`: the OAuth 2.0 Device Authorization Grant, brokered by the control plane. The
 * person opens the provider's page (here or on another device), enters the code and signs in;
 * meanwhile this asks the control plane at the provider's interval (longer after slow_down)
 * until it answers a session, which is stored like a token (mode 0600) and sent as
 * `Authorization: Session gpss_…`. It ends like the portal's sessions (expiry, sign-out at the
 * provider, a refused recheck); `gpushards logout` ends it on the control plane too.
 */
async function signInWithProvider(command: Command): Promise<void> {
  const options = globals(command);
  const url = (options.url ?? process.env['GPUSHARDS_URL'] ?? 'http://127.0.0.1:4000')
    .replace(/\/+$/, '')
    .replace(/\/graphql$/, '');
  const started = await postAuth<DeviceStart & { message?: string }>(url, '/auth/cli/device', {});
  if (started.status !== 200) {
    throw new CliError(
      `the sign-in could not start (${started.status}): ${started.body.message ?? JSON.stringify(started.body)}`,
      EXIT.UNREACHABLE,
    );
  }
  const device = started.body;
  process.stderr.write(
    `To sign in, open ${device.verificationUriComplete ?? device.verificationUri}\n` +
      `and check that it shows the code ${device.userCode} (enter it at ${device.verificationUri} otherwise).\n` +
      'Waiting for you to sign in there…\n',
  );
  let interval = device.interval;
  const deadline = Date.now() + device.expiresIn * 1000;
  for (;;) {
    // The provider's interval between token requests (RFC 8628 3.5).
    await new Promise((resolve) => setTimeout(resolve, interval * 1000));
    const answer = await postAuth<{
      status?: string;
      session?: string;
      error?: string;
      message?: string;
    }>(url, '/auth/cli/token', { handle: device.handle });
    if (answer.status === 200 && answer.body.status === 'signed_in' && answer.body.session) {
      const token = answer.body.session;
      const me = await new Api({ url, token }).request(MeDocument);
      saveLogin({ url, token });
      if (options.json) return printJson({ url, config: configPath(), me: me.me });
      process.stdout.write(
        `signed in to ${url} as ${me.me.name} (${me.me.role}${me.me.team ? ` of ${me.me.team.name}` : ''}); saved in ${configPath()}\n`,
      );
      return;
    }
    if (answer.status === 200 && answer.body.status === 'slow_down') interval += 5;
    else if (answer.status === 403) {
      throw new CliError(
        answer.body.message ?? 'your groups give no access',
        EXIT.FORBIDDEN,
        'FORBIDDEN',
      );
    } else if (answer.status !== 200) {
      throw new CliError(
        `the sign-in failed: ${answer.body.message ?? answer.body.error ?? answer.status}`,
        EXIT.UNAUTHENTICATED,
        'UNAUTHENTICATED',
      );
    }
    if (Date.now() > deadline) {
      throw new CliError(
        'the code expired before you signed in: run it again',
        EXIT.UNAUTHENTICATED,
      );
    }
  }
}

async function readStdin(): Promise<string> {
  let text = '';
  for await (const chunk of process.stdin) text += chunk;
  return text;
}

export function logoutCommand(): Command {
  return new Command('logout')
    .description('forget the stored URL and token (a session from login --sso is ended too)')
    .action(async () => {
      const stored = storedLogin();
      if (stored?.token.startsWith('gpss_')) {
        // Ends the session on the control plane, as the portal's Sign out does; a control plane
        // that cannot be reached leaves it to expire.
        await fetch(`${stored.url}/auth/logout`, {
          method: 'POST',
          headers: { cookie: `gpushards_session=${stored.token}` },
        }).catch(() => undefined);
      }
      process.stdout.write(removeLogin() ? `removed ${configPath()}\n` : 'not logged in\n');
    });
}

export function whoamiCommand(): Command {
  return new Command('whoami')
    .description('the token in use: its name, role and team')
    .action(async (_o: unknown, command: Command) => {
      const api = apiFor(command);
      const me = await api.request(MeDocument);
      if (globals(command).json) return printJson({ url: api.login.url, ...me.me });
      process.stdout.write(
        `${me.me.name} (${me.me.role}${me.me.team ? ` of ${me.me.team.name}` : ''}) at ${api.login.url}\n`,
      );
    });
}

export function usageCommand(): Command {
  return examples(
    new Command('usage')
      .description(
        "a team's reserved, used and suspended (elastic shards' memory in host RAM) GiB-hours over [from, to), per shard (at most 31 days)",
      )
      .requiredOption('--from <date>', 'start: 2026-11-01 (UTC day) or an ISO time with a zone')
      .option('--to <date>', 'end, excluded (default: now)')
      .option('--team <name|id>', 'a team (admins); default: your own')
      .option('--csv', 'CSV, one line per shard, for spreadsheets')
      .action(
        async (
          options: { from: string; to?: string; team?: string; csv?: boolean },
          command: Command,
        ) => {
          const from = isoTime(options.from, '--from');
          const to = options.to ? isoTime(options.to, '--to') : new Date().toISOString();
          const api = apiFor(command);
          const teamId = await teamIdOrOwn(api, options.team);
          const first = await api.request(UsageByShardDocument, { teamId, from, to, first: 100 });
          const report = first.usage;
          const shards = report.shards.edges.map((e) => e.node);
          let page = report.shards.pageInfo;
          while (page.hasNextPage) {
            const next = await api.request(UsageByShardDocument, {
              teamId,
              from,
              to,
              first: 100,
              after: page.endCursor,
            });
            shards.push(...next.usage.shards.edges.map((e) => e.node));
            page = next.usage.shards.pageInfo;
          }
          if (options.csv) {
            const lines = [
              'shard_id,shard_name,host,reserved_gib_hours,used_gib_hours,peak_used_bytes,suspended_gib_hours',
            ];
            for (const s of shards) {
              lines.push(
                [
                  s.shardId,
                  csvField(s.shardName),
                  csvField(s.hostId ?? ''),
                  s.reservedGibHours,
                  s.usedGibHours,
                  s.peakUsed.bytes,
                  s.suspendedGibHours,
                ].join(','),
              );
            }
            return void process.stdout.write(`${lines.join('\n')}\n`);
          }
          if (globals(command).json) return printJson({ ...report, shards });
          // A few seconds of a small shard are some, not none.
          const gh = (n: number) =>
            n > 0 && n < 0.005 ? '< 0.01' : (Math.round(n * 100) / 100).toString();
          process.stdout.write(
            `${report.from} to ${report.measuredUntil}: ${gh(report.reservedGibHours)} GiB-hours reserved, ` +
              `${gh(report.usedGibHours)} used, peak ${report.peakUsed.human}, ${report.shardCount} shard(s)` +
              (report.suspendedGibHours > 0
                ? `; ${gh(report.suspendedGibHours)} GiB-hours suspended in host RAM`
                : '') +
              '\n',
          );
          if (shards.length > 0) {
            process.stdout.write(
              `\n${table(
                ['SHARD', 'HOST', 'RESERVED GiB-h', 'USED GiB-h', 'SUSPENDED GiB-h', 'PEAK'],
                shards.map((s) => [
                  s.shardName,
                  s.hostId,
                  gh(s.reservedGibHours),
                  gh(s.usedGibHours),
                  gh(s.suspendedGibHours),
                  s.peakUsed.human,
                ]),
              )}\n`,
            );
          }
        },
      ),
    [
      'gpushards usage --from 2026-11-01 --to 2026-11-08',
      'gpushards usage --from 2026-11-01 --csv > usage.csv',
    ],
  );
}

export function previewCommand(): Command {
  return examples(
    withComputeOptions(
      new Command('preview')
        .description(
          "where a shard would go now, or each host's reason why not (reserves nothing); exit 6 if it does not fit",
        )
        .requiredOption('-m, --memory <size>', 'memory per GPU, like 12g')
        .option('-g, --gpus <n>', 'number of GPUs', '1')
        .option('--team <name|id>', 'the team (admins must name one)')
        .option('--model <parts>', 'GPU models, comma-separated'),
    ).action(
      async (
        options: {
          memory: string;
          gpus: string;
          team?: string;
          model?: string;
          compute?: string;
          computeMode?: string;
        },
        command: Command,
      ) => {
        const memoryPerGpu = checkSize(options.memory, '--memory');
        const { share, mode, input } = computeInput(options);
        const api = apiFor(command);
        const teamId = await teamIdFor(api, options.team);
        const result = await api.request(PreviewDocument, {
          input: {
            memoryPerGpu,
            gpuCount: Number(options.gpus),
            ...(teamId ? { teamId } : {}),
            ...(options.model ? { gpuModelInclude: options.model.split(',') } : {}),
            ...input,
          },
        });
        const p = result.placementPreview;
        if (globals(command).json) printJson(p);
        else {
          process.stdout.write(
            p.fits
              ? `fits on ${p.hostId}, reserving ${p.reservedPerGpu?.human} per GPU${share !== null ? ` and ${shareLabel(share, mode)} of its compute` : ''}\n`
              : `does not fit: ${p.message}\n`,
          );
          if (p.quotaProblem) process.stdout.write(`quota would refuse it: ${p.quotaProblem}\n`);
          if (p.verdict === 'WAIT') {
            process.stdout.write(
              `createShard would wait as PENDING${p.waitingAhead > 0 ? ` (${p.waitingAhead} in the queue)` : ''}\n`,
            );
          }
          if (!p.fits && p.hosts.length > 0) {
            process.stdout.write(
              `${table(
                ['HOST', 'WHY NOT'],
                p.hosts.map((h) => [h.hostId, h.reason]),
              )}\n`,
            );
          }
        }
        if (!p.fits || p.quotaProblem) process.exitCode = EXIT.REFUSED;
      },
    ),
    [
      'gpushards preview -m 12g',
      'gpushards preview -m 8g --compute 50 --compute-mode capped',
      'gpushards preview -m 8g --compute 30 --compute-mode isolated',
      'gpushards preview -m 40g -g 2 --model H100 --json',
    ],
  );
}
