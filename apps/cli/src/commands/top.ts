import { Command } from 'commander';
import type { ResultOf } from 'gql.tada';
import { apiFor, examples, globals, teamIdFor } from '../context.js';
import { ListShards, ShardEvents } from '../queries.js';
import { shardRows } from './shards.js';

type Shard = ResultOf<typeof ListShards>['shards']['edges'][number]['node'];

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
        const draw = (): void => {
          const rows = [...shards.values()]
            .filter((s) => s.state !== 'DELETED')
            .sort((a, b) => b.createdAt.localeCompare(a.createdAt));
          process.stdout.write(
            `\x1b[H\x1b[2J${api.login.url}  ${new Date().toISOString()}  (Ctrl-C quits)\n\n${rows.length ? shardRows(rows) : 'no shards'}\n`,
          );
        };
        const subscription = api.subscribe(ShardEvents, teamId ? { teamId } : {}, (data) => {
          const event = data.shardEvents;
          shards.set(event.shard.id, event.shard);
          if (tty) draw();
          else if (json) process.stdout.write(`${JSON.stringify(event)}\n`);
          else
            process.stdout.write(
              `${event.at} ${event.shard.name} ${event.previousState ?? '-'} -> ${event.state} host=${event.shard.hostId ?? '-'}\n`,
            );
        });
        await Promise.race([subscription.connected, subscription.done]);
        const listed = await api.request(ListShards, { first: 50, ...(teamId ? { teamId } : {}) });
        for (const { node } of listed.shards.edges)
          if (!shards.has(node.id)) shards.set(node.id, node);
        if (tty) draw();
        else process.stderr.write(`watching ${shards.size} shard(s); one line per state change\n`);
        process.once('SIGINT', () => subscription.stop());
        process.once('SIGTERM', () => subscription.stop());
        await subscription.done;
      }),
    ['gpushards top', 'gpushards top --json | jq -c "{name: .shard.name, state}"'],
  );
}
