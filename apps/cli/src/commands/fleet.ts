import { Command } from 'commander';
import { CliError, EXIT } from '../exit-codes.js';
import { apiFor, examples, globals, teamIdFor } from '../context.js';
import { age, printIds, printJson, table, withQuiet } from '../output.js';
import { gpuComputeLabel } from '../compute.js';
import {
  AdminTokensDocument,
  CordonDocument,
  CreateTokenDocument,
  DrainDocument,
  HostsDocument,
  MeDocument,
  RemoveHostDocument,
  RevokeTokenDocument,
  SetGpuOvercommitDocument,
  TeamTokensDocument,
  UncordonDocument,
} from '@gpushards/graphql-client';

export function hostsCommand(): Command {
  const hosts = new Command('hosts')
    .alias('host')
    .description(
      'the fleet: hosts and their GPUs; cordon, uncordon, drain, remove, overcommit (admins)',
    );
  examples(
    withQuiet(hosts.command('ls', { isDefault: true }))
      .alias('list')
      .description(
        "every host with its GPUs: memory, host RAM taken by suspended elastic shards of the host's budget (SUSPENDED; '-': the host does not suspend), the compute shares guaranteed on each GPU, the MPS partition a host keeps for isolated shards (ISOLATED; '-': none), and each GPU's oversubscription ratio for elastic shards with the caps suspended from it (OVERCOMMIT; '-': none, `hosts overcommit`)",
      )
      .action(async (_options: unknown, command: Command) => {
        const result = await apiFor(command).request(HostsDocument, { first: 100 });
        const rows = result.hosts.edges.map((e) => e.node);
        if (
          printIds(
            command,
            rows.map((h) => h.id),
          )
        )
          return;
        if (globals(command).json) return printJson(rows);
        if (rows.length === 0) return void process.stdout.write('no hosts\n');
        process.stdout.write(
          `${table(
            [
              'HOST',
              'STATE',
              'CORDONED',
              'GPUS',
              'RESERVED',
              'FREE',
              'SUSPENDED',
              'ISOLATED',
              'HEARTBEAT',
            ],
            rows.map((h) => [
              h.id,
              h.state,
              h.cordoned ? 'yes' : 'no',
              `${h.gpus.length}${h.simulated ? ' (simulated)' : ''}`,
              `${h.memory.reserved.human} / ${h.memory.total.human}`,
              h.memory.free.human,
              Number(h.memory.suspendBudget.bytes) > 0
                ? `${h.memory.suspended.human} / ${h.memory.suspendBudget.human}`
                : '-',
              // The MPS partition its agent keeps for isolated shards.
              h.computeIsolatedPoolPercent > 0 ? `${h.computeIsolatedPoolPercent}%` : '-',
              h.lastHeartbeatAt ? `${age(h.lastHeartbeatAt)} ago` : '-',
            ]),
          )}\n\n${table(
            ['HOST', 'GPU', 'MODEL', 'TOTAL', 'RESERVED', 'USED', 'COMPUTE', 'OVERCOMMIT'],
            rows.flatMap((h) =>
              h.gpus.map((g) => [
                h.id,
                g.index,
                g.model,
                g.total.human,
                g.reserved.human,
                g.used.human,
                gpuComputeLabel(g),
                // Caps, resident and suspended, may add up to total × ratio (elastic shards).
                g.overcommitRatio === 1
                  ? '-'
                  : `×${g.overcommitRatio}` +
                    (Number(g.suspended.bytes) > 0 ? ` (${g.suspended.human} suspended)` : ''),
              ]),
            ),
          )}\n`,
        );
      }),
    ['gpushards hosts', 'gpushards hosts --json | jq ".[] | {id, state}"'],
  );
  for (const [name, doc, description] of [
    ['cordon', CordonDocument, 'take no new shards on this host'],
    ['uncordon', UncordonDocument, 'take shards again'],
    ['drain', DrainDocument, 'cordon and stop every shard on the host'],
  ] as const) {
    examples(
      hosts
        .command(`${name} <host>`)
        .description(description)
        .action(async (id: string, _options: unknown, command: Command) => {
          const document = doc as unknown as typeof CordonDocument;
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
  examples(
    hosts
      .command('remove <host>')
      .alias('rm')
      .description(
        'retire a drained host for good (admins): gone from the fleet, its agent refused; its history stays',
      )
      .action(async (id: string, _options: unknown, command: Command) => {
        const { removeHost: host } = await apiFor(command).request(RemoveHostDocument, { id });
        if (globals(command).json) printJson(host);
        else process.stdout.write(`${host.id} removed\n`);
      }),
    ['gpushards hosts drain gpu-box-7', 'gpushards hosts remove gpu-box-7'],
  );
  examples(
    hosts
      .command('overcommit <host> <ratio>')
      .description(
        "let the caps on the host's GPUs, resident and suspended, add up to memory × ratio (admins): only elastic shards take the part past the memory, by being suspended to host RAM (docs/elastic.md); 1 turns it off. Exit 7 when the caps already there exceed the new bound",
      )
      .option('--gpu <uuid>', 'one GPU of the host only')
      .action(async (id: string, ratio: string, options: { gpu?: string }, command: Command) => {
        const value = Number(ratio);
        if (!Number.isFinite(value) || value < 1)
          throw new CliError(
            '<ratio>: a number from 1 (no oversubscription), like 3',
            EXIT.USAGE,
            'BAD_USER_INPUT',
          );
        const { setGpuOvercommit: gpus } = await apiFor(command).request(SetGpuOvercommitDocument, {
          hostId: id,
          ratio: value,
          ...(options.gpu ? { gpuUuid: options.gpu } : {}),
        });
        if (globals(command).json) printJson({ hostId: id, ratio: value, gpus });
        else process.stdout.write(`${id}: ${gpus} GPU(s) at ratio ${value}\n`);
      }),
    [
      'gpushards hosts overcommit gpu-box-7 3',
      'gpushards hosts overcommit gpu-box-7 2 --gpu GPU-…',
    ],
  );
  return hosts;
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
        const me = await api.request(MeDocument);
        const includeRevoked = options.revoked === true;
        const teamId = (await teamIdFor(api, options.team)) ?? me.me.team?.id;
        const rows = teamId
          ? (
              await api.request(TeamTokensDocument, { id: teamId, first: 100, includeRevoked })
            ).team.apiTokens.edges.map((e) => e.node)
          : (
              await api.request(AdminTokensDocument, { first: 100, includeRevoked })
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
        const result = await api.request(CreateTokenDocument, {
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
        const result = await apiFor(command).request(RevokeTokenDocument, { id });
        if (globals(command).json) printJson(result.revokeApiToken);
        else process.stdout.write(`token ${result.revokeApiToken.name} revoked\n`);
      }),
    ['gpushards tokens revoke 3f0c…'],
  );
  return tokens;
}
