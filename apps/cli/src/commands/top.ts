import { Command } from 'commander';
import { apiFor, examples, globals, teamIdFor } from '../context.js';
import { ShardsDocument, ShardEventsDocument, type ResultOf } from '@gpushards/graphql-client';
import { shardRows } from './shards.js';

type Shard = ResultOf<typeof ShardsDocument>['shards']['edges'][number]['node'];
type ShardEvent = ResultOf<typeof ShardEventsDocument>['shardEvents'];

/** Notices kept under the live table. */
const NOTICES = 5;

/**
 * What an event that is no state change says, in words: ungoverned GPU work (the compute
 * fence) and what was done about it; undefined for the others.
 */
export function eventNotice(event: ShardEvent): string | undefined {
  const found = event.ungovernedCompute;
  if (event.kind !== 'UNGOVERNED_COMPUTE' || !found) return undefined;
  const done =
    found.action === 'KILL'
      ? `killed ${found.killedPids.join(', ') || 'nothing'}`
      : found.action === 'STOP'
        ? 'stopping the shard'
        : 'reported';
  return `${event.at} ${event.shard.name} ${found.message}: ${done}`;
}

/**
 * A live view of shards from shardEvents. On a terminal it redraws a table; piped, it prints
 * one line per event (with --json, one JSON object per line) so scripts can follow it.
 */
export function topCommand(): Command {
  return examples(
    new Command('top')
      .description(
        "a live view of your team's shards (admins: the fleet's), from the shardEvents subscription",
      )
      .option('--team <name|id>', 'one team (admins)')
      .action(async (options: { team?: string }, command: Command) => {
        const api = apiFor(command);
        const teamId = await teamIdFor(api, options.team);
        const json = globals(command).json === true;
        const tty = process.stdout.isTTY === true && !json;
        const shards = new Map<string, Shard>();
        const notices: string[] = [];
        const draw = (): void => {
          const rows = [...shards.values()]
            .filter((s) => s.state !== 'DELETED')
            .sort((a, b) => b.createdAt.localeCompare(a.createdAt));
          const recent = notices.length ? `\n${notices.join('\n')}\n` : '';
          process.stdout.write(
            `\x1b[H\x1b[2J${api.login.url}  ${new Date().toISOString()}  (Ctrl-C quits)\n\n${rows.length ? shardRows(rows) : 'no shards'}\n${recent}`,
          );
        };
        const subscription = api.subscribe(
          ShardEventsDocument,
          teamId ? { teamId } : {},
          (data) => {
            const event = data.shardEvents;
            shards.set(event.shard.id, event.shard);
            const notice = eventNotice(event);
            if (notice !== undefined) notices.push(notice);
            if (notices.length > NOTICES) notices.shift();
            if (tty) draw();
            else if (json) process.stdout.write(`${JSON.stringify(event)}\n`);
            else
              process.stdout.write(
                `${notice ?? `${event.at} ${event.shard.name} ${event.previousState ?? '-'} -> ${event.state}`} host=${event.shard.hostId ?? '-'}\n`,
              );
          },
        );
        await Promise.race([subscription.connected, subscription.done]);
        const listed = await api.request(ShardsDocument, {
          first: 50,
          ...(teamId ? { teamId } : {}),
        });
        for (const { node } of listed.shards.edges)
          if (!shards.has(node.id)) shards.set(node.id, node);
        if (tty) draw();
        else process.stderr.write(`watching ${shards.size} shard(s); one line per event\n`);
        process.once('SIGINT', () => subscription.stop());
        process.once('SIGTERM', () => subscription.stop());
        await subscription.done;
      }),
    ['gpushards top', 'gpushards top --json | jq -c "{name: .shard.name, state}"'],
  );
}
