import { Command } from 'commander';
import {
  GroupMappingsDocument,
  RemoveGroupMappingDocument,
  SetGroupMappingDocument,
} from '@gpushards/graphql-client';
import { CliError, EXIT } from '../exit-codes.js';
import { apiFor, examples, globals, teamIdFor } from '../context.js';
import { printJson, table } from '../output.js';

const ROLES = ['MEMBER', 'VIEWER'] as const;

/** `gpushards groups`: which provider groups give which team and role at sign-in (admins). */
export function groupsCommand(): Command {
  const groups = new Command('groups')
    .alias('group')
    .description(
      "sign-in through the organisation's provider: which provider groups give which team and role (admins)",
    );
  examples(
    groups
      .command('ls', { isDefault: true })
      .alias('list')
      .description('the group mapping')
      .action(async (_options: unknown, command: Command) => {
        const { groupMappings } = await apiFor(command).request(GroupMappingsDocument);
        if (globals(command).json) return printJson(groupMappings);
        process.stdout.write(
          groupMappings.length === 0
            ? 'no group is mapped: people who sign in get no access\n'
            : `${table(
                ['GROUP', 'TEAM', 'ROLE'],
                groupMappings.map((m) => [m.group, m.team?.name ?? '(the fleet)', m.role]),
              )}\n`,
        );
      }),
    ['gpushards groups'],
  );
  examples(
    groups
      .command('set <group>')
      .description(
        "people in the provider group get a role in a team (or the fleet's ADMIN) at their next sign-in",
      )
      .option('--team <team>', 'the team (name or id)')
      .option('--role <role>', 'MEMBER or VIEWER', 'MEMBER')
      .option('--admin', 'fleet-wide ADMIN instead of a team role')
      .action(
        async (
          group: string,
          options: { team?: string; role: string; admin?: boolean },
          command: Command,
        ) => {
          const role = options.role.toUpperCase();
          if (!options.admin && !(ROLES as readonly string[]).includes(role)) {
            throw new CliError('--role: MEMBER or VIEWER (--admin for the fleet)', EXIT.USAGE);
          }
          if (options.admin === (options.team !== undefined)) {
            throw new CliError('give --team <team> for a team role, or --admin alone', EXIT.USAGE);
          }
          const api = apiFor(command);
          const teamId = await teamIdFor(api, options.team);
          const { setGroupMapping: m } = await api.request(SetGroupMappingDocument, {
            group,
            role: options.admin ? 'ADMIN' : (role as (typeof ROLES)[number]),
            ...(teamId === undefined ? {} : { teamId }),
          });
          if (globals(command).json) printJson(m);
          else process.stdout.write(`${m.group} → ${m.role} of ${m.team?.name ?? 'the fleet'}\n`);
        },
      ),
    [
      'gpushards groups set ml-researchers --team ml-research',
      'gpushards groups set ml-leads --team ml-research --role MEMBER',
      'gpushards groups set gpu-ops --admin',
    ],
  );
  examples(
    groups
      .command('rm <group>')
      .alias('remove')
      .description("remove the group's rule in a team (or, without --team, its ADMIN rule)")
      .option('--team <team>', 'the team (name or id)')
      .action(async (group: string, options: { team?: string }, command: Command) => {
        const api = apiFor(command);
        const teamId = await teamIdFor(api, options.team);
        const { removeGroupMapping: m } = await api.request(RemoveGroupMappingDocument, {
          group,
          ...(teamId === undefined ? {} : { teamId }),
        });
        if (globals(command).json) printJson(m);
        else process.stdout.write(`${m.group} no longer gives ${m.team?.name ?? 'the fleet'}\n`);
      }),
    ['gpushards groups rm ml-researchers --team ml-research'],
  );
  return groups;
}
