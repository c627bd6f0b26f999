#!/usr/bin/env node
// gpushards: the GPU Shards command line, on the GraphQL API alone.
import { Command, CommanderError } from 'commander';
import { CliError, EXIT, EXIT_CODE_HELP } from './exit-codes.js';
import { shardsCommand } from './commands/shards.js';
import { hostsCommand, tokensCommand } from './commands/fleet.js';
import { quotaCommand, teamsCommand } from './commands/teams.js';
import {
  loginCommand,
  logoutCommand,
  previewCommand,
  usageCommand,
  whoamiCommand,
} from './commands/account.js';
import { topCommand } from './commands/top.js';
import { groupsCommand } from './commands/groups.js';
import { completionCommand } from './commands/completion.js';

const HELP_AFTER_ERROR = '(add --help for usage)';

export function buildProgram(): Command {
  const program = new Command('gpushards')
    .description(
      'GPU Shards from the command line: shards with hard GPU memory caps, quotas, usage and the fleet',
    )
    .version('0.1.0')
    .option('--url <url>', 'control plane URL (default: GPUSHARDS_URL, then `gpushards login`)')
    .option('--token <token>', 'API token (default: GPUSHARDS_TOKEN, then `gpushards login`)')
    .option('--json', 'JSON output for scripts')
    .addHelpText(
      'after',
      `
Examples:
  $ gpushards login --url http://127.0.0.1:4000 --token "$(cat .gpushards/admin-token)"
  $ gpushards shards create probe -i gpushards/demo-probe:local -m 4g --wait
  $ gpushards shards ls --json | jq -r '.[] | "\\(.name) \\(.state)"'
  $ gpushards usage --from 2026-11-01 --csv > usage.csv

Sizes are written as "12g", "1536m" or "2t" (1024-based).
Config: $XDG_CONFIG_HOME/gpushards/config.json (~/.config/gpushards), mode 0600.

${EXIT_CODE_HELP}
`,
    );
  for (const command of [
    loginCommand(),
    logoutCommand(),
    whoamiCommand(),
    shardsCommand(),
    usageCommand(),
    previewCommand(),
    quotaCommand(),
    hostsCommand(),
    teamsCommand(),
    tokensCommand(),
    groupsCommand(),
    topCommand(),
  ]) {
    program.addCommand(command);
  }
  program.addCommand(completionCommand(program));
  // Every command, however deep: a parse error exits 2, and says where help is (subcommands
  // added with addCommand inherit neither from the program).
  const everyCommand = (command: Command): void => {
    command.exitOverride();
    command.showHelpAfterError(HELP_AFTER_ERROR);
    command.commands.forEach(everyCommand);
  };
  everyCommand(program);
  return program;
}

function fail(error: unknown): never {
  if (error instanceof CommanderError) {
    // --help and --version exit 0; every other parse problem is a usage error.
    process.exit(error.exitCode === 0 ? EXIT.OK : EXIT.USAGE);
  }
  const json = process.argv.includes('--json');
  if (error instanceof CliError) {
    if (json) {
      process.stderr.write(
        `${JSON.stringify({ error: { code: error.code, message: error.message, details: error.details } })}\n`,
      );
    } else {
      process.stderr.write(
        `gpushards: ${error.message}\n${error.details.map((d) => `  ${d}\n`).join('')}`,
      );
    }
    process.exit(error.exitCode);
  }
  process.stderr.write(
    `gpushards: unexpected error: ${(error as Error)?.stack ?? String(error)}\n`,
  );
  process.exit(EXIT.ERROR);
}

try {
  await buildProgram().parseAsync(process.argv);
} catch (error) {
  fail(error);
}
