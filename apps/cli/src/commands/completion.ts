import { Command } from 'commander';
import { CliError, EXIT } from '../exit-codes.js';
import { examples } from '../context.js';

/** A command's subcommands (with aliases) and options, each once. */
function words(command: Command, ...more: string[]): string {
  const all = [
    ...command.commands.flatMap((c) => [c.name(), ...c.aliases()]),
    ...command.options.map((o) => o.long ?? o.short ?? '').filter((w) => w !== ''),
    ...more,
  ];
  return [...new Set(all)].join(' ');
}

/**
 * A bash completion script from the program's own command tree (zsh loads it through
 * bashcompinit). It completes `gpushards …` and `npx gpushards …` (the form the README uses):
 * _gpushards_from takes the index of the word `gpushards`.
 */
export function completionScript(program: Command, shell: string): string {
  // The program's options (--url, --token, --json) are accepted after any subcommand too.
  const globals = program.options
    .map((o) => o.long ?? '')
    .filter((w) => w.startsWith('--') && w !== '--version');
  const cases = program.commands
    .filter((c) => c.commands.length > 0 || c.options.length > 0)
    .map((c) => {
      const names = [c.name(), ...c.aliases()].join('|');
      if (c.commands.length === 0)
        return `    ${names}) words="${words(c, ...globals, '--help')}";;`;
      const sub = c.commands
        .map(
          (s) =>
            `        ${[s.name(), ...s.aliases()].join('|')}) words="${words(s, ...globals, '--help')}";;`,
        )
        .join('\n');
      return `    ${names})
      if [ "$depth" -eq 2 ]; then words="${words(c, '--help')}"; else
      case "\${COMP_WORDS[base + 2]}" in
${sub}
        *) words="${words(c, ...globals, '--help')}";;
      esac; fi;;`;
    })
    .join('\n');
  const bash = `# gpushards completion for ${shell}: eval "$(gpushards completion ${shell})"
_gpushards_from() {
  local base=$1 cur="\${COMP_WORDS[COMP_CWORD]}" words
  local depth=$((COMP_CWORD - base))
  if [ "$depth" -eq 1 ]; then
    words="${words(program, '--help')}"
  else
    case "\${COMP_WORDS[base + 1]}" in
${cases}
    *) words="${[...new Set([...globals, '--help'])].join(' ')}";;
    esac
  fi
  COMPREPLY=( $(compgen -W "$words" -- "$cur") )
}
_gpushards() { _gpushards_from 0; }
# npx: gpushards' words after "npx gpushards"; else npx's own (files, by -o default).
_gpushards_npx() {
  COMPREPLY=()
  if [ "$COMP_CWORD" -eq 1 ]; then
    COMPREPLY=( $(compgen -W "gpushards" -- "\${COMP_WORDS[1]}") )
  elif [ "\${COMP_WORDS[1]}" = gpushards ]; then
    _gpushards_from 1
  fi
}
complete -F _gpushards gpushards
complete -o default -F _gpushards_npx npx
`;
  return shell === 'zsh' ? `autoload -U +X bashcompinit && bashcompinit\n${bash}` : bash;
}

export function completionCommand(program: Command): Command {
  return examples(
    new Command('completion')
      .description('print a shell completion script (bash or zsh) for gpushards and npx gpushards')
      .argument('[shell]', 'bash or zsh', 'bash')
      .action((shell: string) => {
        if (!['bash', 'zsh'].includes(shell))
          throw new CliError(`completion for bash or zsh, not ${shell}`, EXIT.USAGE);
        process.stdout.write(completionScript(program, shell));
      }),
    [
      'eval "$(gpushards completion bash)"   # in ~/.bashrc',
      'eval "$(gpushards completion zsh)"    # in ~/.zshrc',
      'eval "$(npx gpushards completion bash)"   # from the repository',
    ],
  );
}
