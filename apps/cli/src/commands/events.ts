import { Command, InvalidArgumentError } from 'commander';
import { apiFor, examples, globals } from '../context.js';
import { ShardEventHistoryDocument } from '@gpushards/graphql-client';
import { printJson, table } from '../output.js';

const KINDS = ['STATE', 'VIOLATION', 'UNGOVERNED_COMPUTE', 'IDLE', 'IDLE_STOP'] as const;
type Kind = (typeof KINDS)[number];

function parseLimit(value: string): number {
  const n = Number(value);
  if (!/^\d+$/.test(value) || n < 1 || n > 500) {
    throw new InvalidArgumentError('a whole number from 1 to 500');
  }
  return n;
}

function parseKind(value: string, previous: Kind[] = []): Kind[] {
  const kind = value.toUpperCase().replaceAll('-', '_') as Kind;
  if (!KINDS.includes(kind)) {
    throw new InvalidArgumentError(`one of ${KINDS.map((k) => k.toLowerCase()).join(', ')}`);
  }
  return [...previous, kind];
}

function done(action: string, killedPids: readonly number[]): string {
  if (action === 'KILL') return `killed ${killedPids.join(', ') || 'nothing'}`;
  if (action === 'STOP') return 'stopped';
  return 'reported';
}

/** `shards events <shard>`: the shard's stored history, added to the `shards` command. */
export function addEventsCommand(
  shards: Command,
  shardId: (command: Command, ref: string) => Promise<string>,
): void {
  examples(
    shards
      .command('events <shard>')
      .description(
        'its stored events, newest first: state changes and notices (memory cap violations, ungoverned GPU work, idle reports and stops), as far back as the control plane keeps them',
      )
      .option('--limit <n>', 'how many, 1 to 500', parseLimit, 20)
      .option(
        '--kind <kind>',
        `only this kind (repeatable): ${KINDS.map((k) => k.toLowerCase()).join(', ')}`,
        parseKind,
      )
      .action(async (ref: string, options: { limit: number; kind?: Kind[] }, command: Command) => {
        const api = apiFor(command);
        const result = await api.request(ShardEventHistoryDocument, {
          shardId: await shardId(command, ref),
          first: options.limit,
          ...(options.kind ? { kinds: options.kind } : {}),
        });
        const rows = result.shardEventHistory.edges.map((e) => e.node);
        if (globals(command).json) return printJson(rows);
        if (rows.length === 0) return void process.stdout.write('no events stored\n');
        process.stdout.write(
          `${table(
            ['AT', 'KIND', 'STATE', 'WHAT'],
            rows.map((e) => {
              const what = e.violation
                ? `${e.violation.real.human} past its cap of ${e.violation.cap.human}: ${done(e.violation.action, e.violation.killedPids)}`
                : e.ungovernedCompute
                  ? `${e.ungovernedCompute.message}: ${done(e.ungovernedCompute.action, e.ungovernedCompute.killedPids)}`
                  : e.idle
                    ? `no kernel for ${Math.round(e.idle.idleSeconds)}s: ${e.idle.action === 'STOP' ? 'stopped' : 'reported'}`
                    : '';
              const state =
                e.previousState === null || e.previousState === e.state
                  ? e.state
                  : `${e.previousState} -> ${e.state}`;
              return [e.at, e.kind, state, what];
            }),
          )}\n`,
        );
      }),
    [
      'gpushards shards events trainer',
      'gpushards shards events trainer --kind violation --kind ungoverned-compute --limit 100',
      'gpushards shards events trainer --json | jq -r ".[].kind"',
    ],
  );
}
