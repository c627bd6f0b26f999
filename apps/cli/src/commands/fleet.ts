import { Command } from 'commander';
import { CliError, EXIT } from '../exit-codes.js';
import { apiFor, examples, globals, teamIdFor } from '../context.js';
import { age, checkSize, printJson, table } from '../output.js';
import {
  AdminTokens,
  Cordon,
  CreateTeam,
  CreateToken,
  Drain,
  Hosts,
  Me,
  RevokeToken,
  SetQuota,
  Team,
  TeamTokens,
  Teams,
  Uncordon,
} from '../queries.js';

export function hostsCommand(): Command {
  const hosts = new Command('hosts')
    .alias('host')
    .description('the fleet: hosts and their GPUs; cordon, uncordon, drain (admins)');
  examples(
    hosts
      .command('ls', { isDefault: true })
      .alias('list')
      .description('every host with its GPUs')
      .action(async (_options: unknown, command: Command) => {
        const result = await apiFor(command).request(Hosts, { first: 100 });
        const rows = result.hosts.edges.map((e) => e.node);
        if (globals(command).json) return printJson(rows);
        if (rows.length === 0) return void process.stdout.write('no hosts\n');
        process.stdout.write(
          `${table(
            ['HOST', 'STATE', 'CORDONED', 'GPUS', 'RESERVED', 'FREE', 'HEARTBEAT'],
            rows.map((h) => [
              h.id,
              h.state,
              h.cordoned ? 'yes' : 'no',
              `${h.gpus.length}${h.simulated ? ' (simulated)' : ''}`,
              `${h.memory.reserved.human} / ${h.memory.total.human}`,
              h.memory.free.human,
              h.lastHeartbeatAt ? `${age(h.lastHeartbeatAt)} ago` : '-',
            ]),
          )}\n\n${table(
            ['HOST', 'GPU', 'MODEL', 'TOTAL', 'RESERVED', 'USED'],
            rows.flatMap((h) =>
              h.gpus.map((g) => [
                h.id,
                g.index,
                g.model,
                g.total.human,
                g.reserved.human,
                g.used.human,
              ]),
            ),
          )}\n`,
        );
      }),
    ['gpushards hosts', 'gpushards hosts --json | jq ".[] | {id, state}"'],
  );
  for (const [name, doc, description] of [
    ['cordon', Cordon, 'take no new shards on this host'],
    ['uncordon', Uncordon, 'take shards again'],
    ['drain', Drain, 'cordon and stop every shard on the host'],
  ] as const) {
    examples(
      hosts
        .command(`${name} <host>`)
        .description(description)
        .action(async (id: string, _options: unknown, command: Command) => {
          const document = doc as unknown as typeof Cordon;
          const result = (await apiFor(command).request(document, { id })) as unknown as Record<
            string,
            { id: string; state: string; cordoned: boolean }
          >;
          const host = Object.values(result)[0]!;
          if (globals(command).json) printJson(host);
          else
            process.stdout.write(`${host.id} ${host.state}${host.cordoned ? ' (cordoned)' : ''}\n`);
        }),
      [`gpushards hosts ${name} gpu-box-7`],
    );
  }
  return hosts;
}

type TeamNode = Awaited<ReturnType<typeof listTeams>>[number];
async function listTeams(command: Command) {
  const result = await apiFor(command).request(Teams, { first: 100 });
  return result.teams.edges.map((e) => e.node);
}

function teamTable(teams: TeamNode[]): string {
  return table(
    ['TEAM', 'SHARDS', 'RESERVED', 'MAX TOTAL', 'MAX/SHARD', 'MAX SHARDS', 'PRIORITY', 'ID'],
    teams.map((t) => [
      t.name,
      t.usage.shardCount,
      t.usage.reserved.human,
      t.quotaPolicy?.maxTotal.human ?? 'no policy',
      t.quotaPolicy?.maxPerShard.human,
      t.quotaPolicy?.maxShards,
      t.quotaPolicy?.priority,
      t.id,
    ]),
  );
}

export function teamsCommand(): Command {
  const teams = new Command('teams')
    .alias('team')
    .description('teams and their quota policies (admins: every team)');
  examples(
    teams
      .command('ls', { isDefault: true })
      .alias('list')
      .description('teams, what they hold and their quota')
      .action(async (_options: unknown, command: Command) => {
        const rows = await listTeams(command);
        if (globals(command).json) printJson(rows);
        else process.stdout.write(rows.length === 0 ? 'no teams\n' : `${teamTable(rows)}\n`);
      }),
    ['gpushards teams'],
  );
  examples(
    teams
      .command('create <name>')
      .description('a new team (admins); it may place nothing until it has a quota')
      .action(async (name: string, _options: unknown, command: Command) => {
        const result = await apiFor(command).request(CreateTeam, { name });
        if (globals(command).json) printJson(result.createTeam);
        else
          process.stdout.write(
            `team ${result.createTeam.name} created (${result.createTeam.id})\n`,
          );
      }),
    ['gpushards teams create ml-research'],
  );
  examples(
    teams
      .command('set-quota <team>')
      .description("set a team's quota policy (admins)")
      .requiredOption('--max-total <size>', "the team's shards together, like 48g")
      .requiredOption('--max-per-shard <size>', 'one shard over all its GPUs, like 24g')
      .requiredOption('--max-shards <n>', 'shards at once')
      .option('--max-gpus-per-shard <n>', 'GPUs of one shard')
      .option('--models <parts>', 'GPU models allowed, comma-separated')
      .option('--priority <n>', 'higher goes first', '0')
      .action(
        async (team: string, options: Record<string, string | undefined>, command: Command) => {
          const maxTotal = checkSize(options['maxTotal']!, '--max-total');
          const maxPerShard = checkSize(options['maxPerShard']!, '--max-per-shard');
          const maxShards = Number(options['maxShards']);
          if (!Number.isInteger(maxShards) || maxShards < 0)
            throw new CliError('--max-shards: a whole number', EXIT.USAGE);
          const api = apiFor(command);
          const teamId = (await teamIdFor(api, team))!;
          const result = await api.request(SetQuota, {
            teamId,
            input: {
              maxTotal,
              maxPerShard,
              maxShards,
              priority: Number(options['priority']),
              ...(options['maxGpusPerShard']
                ? { maxGpusPerShard: Number(options['maxGpusPerShard']) }
                : {}),
              ...(options['models'] ? { allowedGpuModels: options['models'].split(',') } : {}),
            },
          });
          if (globals(command).json) printJson(result.setQuotaPolicy);
          else process.stdout.write(`${teamTable([result.setQuotaPolicy])}\n`);
        },
      ),
    ['gpushards teams set-quota ml-research --max-total 48g --max-per-shard 24g --max-shards 8'],
  );
  return teams;
}

export function quotaCommand(): Command {
  return examples(
    new Command('quota')
      .description("your team's quota and what it holds now")
      .option('--team <name|id>', 'a team (admins)')
      .action(async (options: { team?: string }, command: Command) => {
        const api = apiFor(command);
        let teamId = await teamIdFor(api, options.team);
        if (teamId === undefined) {
          const me = await api.request(Me);
          if (!me.me.team)
            throw new CliError('admin tokens have no team: name one with --team', EXIT.USAGE);
          teamId = me.me.team.id;
        }
        const { team } = await api.request(Team, { id: teamId });
        if (globals(command).json) return printJson(team);
        const q = team.quotaPolicy;
        if (!q)
          return void process.stdout.write(
            `team ${team.name} has no quota policy: it may place nothing\n`,
          );
        const pct = (a: number, b: number) => (b > 0 ? `${Math.floor((a / b) * 100)}%` : '-');
        process.stdout.write(
          `${table(
            ['TEAM', 'LIMIT', 'HOLDS', 'OF', 'USE'],
            [
              [
                team.name,
                'memory',
                team.usage.reserved.human,
                q.maxTotal.human,
                pct(Number(team.usage.reserved.bytes), Number(q.maxTotal.bytes)),
              ],
              [
                team.name,
                'shards',
                team.usage.shardCount,
                q.maxShards,
                pct(team.usage.shardCount, q.maxShards),
              ],
              [team.name, 'per shard', '-', q.maxPerShard.human, '-'],
            ],
          )}\n`,
        );
      }),
    ['gpushards quota', 'gpushards quota --team ml-research --json'],
  );
}

export function tokensCommand(): Command {
  const tokens = new Command('tokens')
    .alias('token')
    .description('API tokens: list, create (the secret is shown once), revoke');
  examples(
    tokens
      .command('ls', { isDefault: true })
      .alias('list')
      .description("every token (admins) or your team's")
      .option('--revoked', 'include revoked tokens')
      .option('--team <name|id>', "a team's tokens (admins; default: the admin tokens)")
      .action(async (options: { revoked?: boolean; team?: string }, command: Command) => {
        const api = apiFor(command);
        const me = await api.request(Me);
        const includeRevoked = options.revoked === true;
        const teamId = (await teamIdFor(api, options.team)) ?? me.me.team?.id;
        const rows = teamId
          ? (
              await api.request(TeamTokens, { id: teamId, first: 100, includeRevoked })
            ).team.apiTokens.edges.map((e) => e.node)
          : (
              await api.request(AdminTokens, { first: 100, includeRevoked })
            ).adminApiTokens.edges.map((e) => e.node);
        if (globals(command).json) return printJson(rows);
        process.stdout.write(
          `${table(
            ['NAME', 'PREFIX', 'ROLE', 'TEAM', 'CREATED', 'LAST USED', 'REVOKED', 'ID'],
            rows.map((t) => [
              t.name,
              t.prefix,
              t.role,
              t.team?.name,
              `${age(t.createdAt)} ago`,
              t.lastUsedAt ? `${age(t.lastUsedAt)} ago` : 'never',
              t.revokedAt ? 'yes' : '',
              t.id,
            ]),
          )}\n`,
        );
      }),
    ['gpushards tokens', 'gpushards tokens --revoked --json'],
  );
  examples(
    tokens
      .command('create <name>')
      .description('a new token; prints its secret once (the server keeps only a hash)')
      .option('--role <role>', 'ADMIN, MEMBER or VIEWER', 'MEMBER')
      .option('--team <name|id>', 'its team (admins creating a team token)')
      .action(async (name: string, options: { role: string; team?: string }, command: Command) => {
        const role = options.role.toUpperCase();
        if (!['ADMIN', 'MEMBER', 'VIEWER'].includes(role))
          throw new CliError('--role: ADMIN, MEMBER or VIEWER', EXIT.USAGE);
        const api = apiFor(command);
        const teamId = await teamIdFor(api, options.team);
        const result = await api.request(CreateToken, {
          name,
          role: role as 'MEMBER',
          ...(teamId ? { teamId } : {}),
        });
        if (globals(command).json) return printJson(result.createApiToken);
        process.stdout.write(`${result.createApiToken.secret}\n`);
        process.stderr.write(
          `token ${name} (${role}) created: the secret above is shown only now\n`,
        );
      }),
    [
      'gpushards tokens create "ci runner" --team ml-research',
      'MEMBER=$(gpushards tokens create alice --team ml-research)',
    ],
  );
  examples(
    tokens
      .command('revoke <id>')
      .description('revoke a token: requests with it fail at once')
      .action(async (id: string, _options: unknown, command: Command) => {
        const result = await apiFor(command).request(RevokeToken, { id });
        if (globals(command).json) printJson(result.revokeApiToken);
        else process.stdout.write(`token ${result.revokeApiToken.name} revoked\n`);
      }),
    ['gpushards tokens revoke 3f0c…'],
  );
  return tokens;
}
