import { Command } from 'commander';
import { CliError, EXIT } from '../exit-codes.js';
import { examples } from '../context.js';

function words(command: Command): string[] {
  return [
    ...command.commands.flatMap((c) => [c.name(), ...c.aliases()]),
    ...command.options.map((o) => o.long ?? o.short ?? '').filter((w) => w !== ''),
  ];
}

/** A bash completion script from the program's own command tree (zsh loads it through bashcompinit). */
export function completionScript(program: Command, shell: string): string {
  const cases = program.commands
    .filter((c) => c.commands.length > 0 || c.options.length > 0)
    .map((c) => {
      const names = [c.name(), ...c.aliases()].join('|');
      const sub = c.commands
        .map(
          (s) =>
            `      ${[s.name(), ...s.aliases()].join('|')}) words="${words(s).join(' ')} --json --help";;`,
        )
        .join('\n');
      return `    ${names})
      if [ "$COMP_CWORD" -eq 2 ]; then words="${words(c).join(' ')} --help"; else
      case "\${COMP_WORDS[2]}" in
${sub}
      *) words="${words(c).join(' ')} --json --help";;
      esac; fi;;`;
    })
    .join('\n');
  const bash = `# gpushards completion for ${shell}: eval "$(gpushards completion ${shell})"
_gpushards() {
  local cur="\${COMP_WORDS[COMP_CWORD]}" words
  if [ "$COMP_CWORD" -eq 1 ]; then
    words="${words(program).join(' ')} --url --token --json --help"
  else
    case "\${COMP_WORDS[1]}" in
${cases}
    *) words="--json --help";;
    esac
  fi
  COMPREPLY=( $(compgen -W "$words" -- "$cur") )
}
complete -F _gpushards gpushards
`;
  return shell === 'zsh' ? `autoload -U +X bashcompinit && bashcompinit\n${bash}` : bash;
}

export function completionCommand(program: Command): Command {
  return examples(
    new Command('completion')
      .description('print a shell completion script (bash or zsh)')
      .argument('[shell]', 'bash or zsh', 'bash')
      .action((shell: string) => {
        if (!['bash', 'zsh'].includes(shell))
          throw new CliError(`completion for bash or zsh, not ${shell}`, EXIT.USAGE);
        process.stdout.write(completionScript(program, shell));
      }),
    [
      'eval "$(gpushards completion bash)"   # in ~/.bashrc',
      'eval "$(gpushards completion zsh)"    # in ~/.zshrc',
    ],
  );
}
