import type { Command } from 'commander';
import { Api } from './api.js';
import { resolveLogin } from './config.js';

/** Options every command has (from the root program). */
export interface GlobalOptions {
  url?: string;
  token?: string;
  json?: boolean;
}

export function globals(command: Command): GlobalOptions {
  return command.optsWithGlobals<GlobalOptions>();
}

export function apiFor(command: Command): Api {
  const options = globals(command);
  return new Api(resolveLogin({ url: options.url, token: options.token }));
}

/** The caller's team id: --team, or the token's own team; admins must name one. */
export async function teamIdFor(api: Api, team: string | undefined): Promise<string | undefined> {
  if (team === undefined) return undefined;
  if (/^[0-9a-f-]{36}$/i.test(team)) return team;
  const { TeamNamesDocument } = await import('@gpushards/graphql-client');
  const found = await api.request(TeamNamesDocument, { first: 200 });
  const match = found.teams.edges.find((e) => e.node.name === team);
  if (match === undefined) {
    const { CliError, EXIT } = await import('./exit-codes.js');
    throw new CliError(`team "${team}" not found (or not yours)`, EXIT.NOT_FOUND, 'NOT_FOUND');
  }
  return match.node.id;
}

/** The team named by `--team`, else the caller's own (an admin token has none: it must name one). */
export async function teamIdOrOwn(api: Api, team: string | undefined): Promise<string> {
  const named = await teamIdFor(api, team);
  if (named !== undefined) return named;
  const { MeDocument } = await import('@gpushards/graphql-client');
  const me = await api.request(MeDocument);
  if (!me.me.team) {
    const { CliError, EXIT } = await import('./exit-codes.js');
    throw new CliError('admin tokens have no team: name one with --team', EXIT.USAGE);
  }
  return me.me.team.id;
}

/** Examples at the end of a command's --help. */
export function examples(command: Command, lines: string[]): Command {
  return command.addHelpText('after', `\nExamples:\n${lines.map((l) => `  $ ${l}`).join('\n')}\n`);
}
