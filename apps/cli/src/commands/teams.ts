import { Command } from 'commander';
import { formatDuration } from '@gpushards/limits';
import { CliError, EXIT } from '../exit-codes.js';
import { apiFor, examples, globals, teamIdFor, teamIdOrOwn } from '../context.js';
import { checkSize, printIds, printJson, table, withQuiet } from '../output.js';
import { checkDuration } from '../compute.js';
import {
  ArchiveTeamDocument,
  CreateTeamDocument,
  DeleteTeamDocument,
  RenameTeamDocument,
  UnarchiveTeamDocument,
  SetIdlePolicyDocument,
  SetQuotaDocument,
  TeamDocument,
  TeamComputeDocument,
  TeamsDocument,
} from '@gpushards/graphql-client';

/** How often `teams rm --drain` asks again whether the team's shards have stopped. */
const DRAIN_POLL_MS = 1_000;

type TeamNode = Awaited<ReturnType<typeof listTeams>>[number];
async function listTeams(command: Command) {
  const result = await apiFor(command).request(TeamsDocument, { first: 100 });
  return result.teams.edges.map((e) => e.node);
}

/** "30m", "30m, stop 2h", or "-" for none. */
function idlePolicyLabel(policy: TeamNode['idlePolicy']): string {
  if (!policy) return '-';
  const report = formatDuration(policy.idleAfterSeconds);
  const stop =
    policy.stopAfterSeconds === null ? '' : `, stop ${formatDuration(policy.stopAfterSeconds)}`;
  const suspend =
    policy.suspendAfterSeconds === null
      ? ''
      : `, suspend elastic ${formatDuration(policy.suspendAfterSeconds)}`;
  return `${report}${stop}${suspend}`;
}

/** The team's bound on one shard's compute share: "50%", "none" (0), "100%" when unset. */
function computeBoundLabel(quota: TeamNode['quotaPolicy']): string | undefined {
  if (!quota) return undefined;
  return quota.maxComputeSharePercent === 0 ? 'none' : `${quota.maxComputeSharePercent ?? 100}%`;
}

function teamTable(teams: TeamNode[]): string {
  return table(
    [
      'TEAM',
      'SHARDS',
      'RESERVED',
      'MAX TOTAL',
      'MAX/SHARD',
      'MAX SHARDS',
      'PRIORITY',
      'COMPUTE/SHARD',
      'ELASTIC',
      'IDLE',
      'ID',
    ],
    teams.map((t) => [
      t.archivedAt === null ? t.name : `${t.name} (archived)`,
      t.usage.shardCount,
      t.usage.reserved.human,
      t.quotaPolicy?.maxTotal.human ?? 'no policy',
      t.quotaPolicy?.maxPerShard.human,
      t.quotaPolicy?.maxShards,
      t.quotaPolicy?.priority,
      computeBoundLabel(t.quotaPolicy),
      t.quotaPolicy === null ? undefined : t.quotaPolicy.allowElastic ? 'yes' : 'no',
      idlePolicyLabel(t.idlePolicy),
      t.id,
    ]),
  );
}

export function teamsCommand(): Command {
  const teams = new Command('teams')
    .alias('team')
    .description('teams and their quota policies (admins: every team)');
  examples(
    withQuiet(teams.command('ls', { isDefault: true }))
      .alias('list')
      .description('teams, what they hold and their quota')
      .action(async (_options: unknown, command: Command) => {
        const rows = await listTeams(command);
        if (
          printIds(
            command,
            rows.map((t) => t.id),
          )
        )
          return;
        if (globals(command).json) printJson(rows);
        else process.stdout.write(rows.length === 0 ? 'no teams\n' : `${teamTable(rows)}\n`);
      }),
    ['gpushards teams'],
  );
  examples(
    withQuiet(teams.command('create <name>'))
      .description('a new team (admins); it may place nothing until it has a quota')
      .action(async (name: string, _options: unknown, command: Command) => {
        const result = await apiFor(command).request(CreateTeamDocument, { name });
        if (printIds(command, [result.createTeam.id])) return;
        if (globals(command).json) printJson(result.createTeam);
        else
          process.stdout.write(
            `team ${result.createTeam.name} created (${result.createTeam.id})\n`,
          );
      }),
    ['gpushards teams create ml-research'],
  );
  examples(
    withQuiet(teams.command('rename <team> <name>'))
      .description('a new name for the team (admins); its shards, tokens and history stay')
      .action(async (team: string, name: string, _options: unknown, command: Command) => {
        const api = apiFor(command);
        const id = (await teamIdFor(api, team))!;
        const { renameTeam } = await api.request(RenameTeamDocument, { id, name });
        if (printIds(command, [renameTeam.id])) return;
        if (globals(command).json) printJson(renameTeam);
        else process.stdout.write(`team ${team} is now ${renameTeam.name}\n`);
      }),
    ['gpushards teams rename ml-research ml'],
  );
  for (const [name, document, description, done] of [
    [
      'archive',
      ArchiveTeamDocument,
      'archive the team (admins): no new shards and its tokens refused; what runs keeps running',
      'archived',
    ],
    ['unarchive', UnarchiveTeamDocument, 'undo archive: its tokens work again', 'active again'],
  ] as const) {
    examples(
      withQuiet(teams.command(`${name} <team>`))
        .description(description)
        .action(async (team: string, _options: unknown, command: Command) => {
          const api = apiFor(command);
          const id = (await teamIdFor(api, team))!;
          const result = (await api.request(document as typeof ArchiveTeamDocument, {
            id,
          })) as unknown as Record<string, TeamNode>;
          const changed = Object.values(result)[0]!;
          if (printIds(command, [changed.id])) return;
          if (globals(command).json) printJson(changed);
          else process.stdout.write(`team ${changed.name} ${done}\n`);
        }),
      [`gpushards teams ${name} ml-research`],
    );
  }
  examples(
    teams
      .command('rm <team>')
      .alias('delete')
      .description(
        'delete the team for good (admins): refused while it has live shards unless --drain; its usage and history are kept',
      )
      .option(
        '--drain',
        'archive it and stop its live shards first, then delete it once they stopped',
      )
      .option('--timeout <seconds>', 'with --drain: how long to wait for its shards to stop', '300')
      .action(
        async (team: string, options: { drain?: boolean; timeout: string }, command: Command) => {
          const api = apiFor(command);
          const id = (await teamIdFor(api, team))!;
          const deadline = Date.now() + Number(options.timeout) * 1000;
          let result = (await api.request(DeleteTeamDocument, { id, drainFirst: !!options.drain }))
            .deleteTeam;
          while (!result.deleted) {
            if (Date.now() > deadline) {
              throw new CliError(
                `team ${result.name}: ${result.stoppingShards} shard(s) still stopping after ${options.timeout}s; run this again once they stopped`,
                EXIT.WAIT_FAILED,
              );
            }
            await new Promise((resolve) => setTimeout(resolve, DRAIN_POLL_MS));
            result = (await api.request(DeleteTeamDocument, { id, drainFirst: true })).deleteTeam;
          }
          if (globals(command).json) printJson(result);
          else process.stdout.write(`team ${result.name} deleted\n`);
        },
      ),
    ['gpushards teams rm old-team', 'gpushards teams rm old-team --drain'],
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
      .option(
        '--allow-elastic',
        "the team's shards may be elastic (suspended to host RAM while idle; docs/elastic.md)",
      )
      .option('--no-allow-elastic', "the team's shards may not be elastic")
      .option(
        '--max-compute-share <percent>',
        'the largest compute share per GPU one shard may ask for, 0 (no shares) to 100 (default: 100)',
      )
      .action(
        async (team: string, options: Record<string, string | undefined>, command: Command) => {
          const maxTotal = checkSize(options['maxTotal']!, '--max-total');
          const maxPerShard = checkSize(options['maxPerShard']!, '--max-per-shard');
          const maxShards = Number(options['maxShards']);
          if (!Number.isInteger(maxShards) || maxShards < 0)
            throw new CliError('--max-shards: a whole number', EXIT.USAGE);
          const computeBound = options['maxComputeShare']?.trim().replace(/%$/, '');
          if (
            computeBound !== undefined &&
            (!/^\d+$/.test(computeBound) || Number(computeBound) > 100)
          ) {
            throw new CliError(
              '--max-compute-share: a whole percent from 0 (no shares) to 100',
              EXIT.USAGE,
              'BAD_USER_INPUT',
            );
          }
          const api = apiFor(command);
          const teamId = (await teamIdFor(api, team))!;
          const result = await api.request(SetQuotaDocument, {
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
              ...(computeBound !== undefined
                ? { maxComputeSharePercent: Number(computeBound) }
                : {}),
              // Left out: the team keeps its setting.
              ...(typeof (options['allowElastic'] as unknown) === 'boolean'
                ? { allowElastic: options['allowElastic'] as unknown as boolean }
                : {}),
            },
          });
          if (globals(command).json) printJson(result.setQuotaPolicy);
          else process.stdout.write(`${teamTable([result.setQuotaPolicy])}\n`);
        },
      ),
    [
      'gpushards teams set-quota ml-research --max-total 48g --max-per-shard 24g --max-shards 8',
      'gpushards teams set-quota ml-research --max-total 48g --max-per-shard 24g --max-shards 8 --max-compute-share 50',
      'gpushards teams set-quota notebooks --max-total 64g --max-per-shard 16g --max-shards 8 --allow-elastic',
    ],
  );
  examples(
    teams
      .command('set-idle-policy <team>')
      .description(
        "report the team's running shards that launch no kernel for a time, and optionally stop them, or suspend the elastic ones to host RAM (admins); only hosts with a compute ledger report activity",
      )
      .option(
        '--after <duration>',
        'report a shard idle after this long without a kernel (at least 1m), like 30m',
      )
      .option('--stop-after <duration>', 'also stop it after this long (at least --after), like 2h')
      .option(
        '--suspend-after <duration>',
        'suspend an elastic shard to host RAM after this long instead (at least --after), like 1h',
      )
      .option('--off', 'remove the policy')
      .action(
        async (
          team: string,
          options: { after?: string; stopAfter?: string; suspendAfter?: string; off?: boolean },
          command: Command,
        ) => {
          if (options.off === true && (options.after || options.stopAfter || options.suspendAfter))
            throw new CliError(
              '--off takes no --after, --stop-after or --suspend-after',
              EXIT.USAGE,
              'BAD_USER_INPUT',
            );
          if (options.off !== true && options.after === undefined)
            throw new CliError('give --after <duration>, or --off', EXIT.USAGE, 'BAD_USER_INPUT');
          const idleAfterSeconds = options.after ? checkDuration(options.after, '--after') : null;
          const stopAfterSeconds = options.stopAfter
            ? checkDuration(options.stopAfter, '--stop-after')
            : null;
          const suspendAfterSeconds = options.suspendAfter
            ? checkDuration(options.suspendAfter, '--suspend-after')
            : null;
          const api = apiFor(command);
          const teamId = (await teamIdFor(api, team))!;
          const result = await api.request(SetIdlePolicyDocument, {
            teamId,
            idleAfterSeconds,
            stopAfterSeconds,
            suspendAfterSeconds,
          });
          const t = result.setTeamIdlePolicy;
          if (globals(command).json) printJson(t);
          else
            process.stdout.write(`team ${t.name}: idle policy ${idlePolicyLabel(t.idlePolicy)}\n`);
        },
      ),
    [
      'gpushards teams set-idle-policy ml-research --after 30m',
      'gpushards teams set-idle-policy ml-research --after 30m --stop-after 2h',
      'gpushards teams set-idle-policy notebooks --after 10m --suspend-after 30m',
      'gpushards teams set-idle-policy ml-research --off',
    ],
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
        const teamId = await teamIdOrOwn(api, options.team);
        const { team } = await api.request(TeamDocument, { id: teamId });
        if (globals(command).json) return printJson(team);
        // Compute: how many GPUs' worth of time the shares of its live shards guarantee.
        const live = await api.request(TeamComputeDocument, { first: 200, teamId });
        let gpusHeld = 0;
        let guaranteed = 0;
        for (const { node } of live.shards.edges) {
          const gpus = node.gpus.filter((g) => g.releasedAt === null).length;
          gpusHeld += gpus;
          guaranteed += (gpus * (node.computeSharePercent ?? 0)) / 100;
        }
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
              [
                team.name,
                'compute',
                `${Math.round(guaranteed * 100) / 100} GPU guaranteed`,
                `${gpusHeld} GPU held`,
                pct(guaranteed, gpusHeld),
              ],
              [team.name, 'compute/shard', '-', computeBoundLabel(q), '-'],
            ],
          )}\n${team.idlePolicy ? `idle policy: report after ${formatDuration(team.idlePolicy.idleAfterSeconds)}${team.idlePolicy.stopAfterSeconds === null ? '' : `, stop after ${formatDuration(team.idlePolicy.stopAfterSeconds)}`}` : 'idle policy: none'}\n`,
        );
      }),
    ['gpushards quota', 'gpushards quota --team ml-research --json'],
  );
}
