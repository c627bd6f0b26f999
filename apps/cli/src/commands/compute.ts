import type { Command } from 'commander';
import { apiFor, examples, globals, teamIdFor } from '../context.js';
import { checkMode, checkShare, shareLabel } from '../compute.js';
import { age, printJson, table } from '../output.js';
import { ShardsDocument, SetShardComputeDocument } from '@gpushards/graphql-client';

/** `shards set-compute` and `shards idle`, added to the `shards` command. */
export function addComputeCommands(
  shards: Command,
  shardId: (command: Command, ref: string) => Promise<string>,
): void {
  examples(
    shards
      .command('set-compute <shard> <percent>')
      .description(
        "a new compute share of each of its GPUs, like resize for memory: a whole percent 1-100, or none (the default split); within the team's bound (exit 6), and each GPU's guaranteed shares at most 100% (exit 6). An isolated shard's share is fixed while it holds its GPUs, and a shard that holds GPUs cannot become isolated (exit 7: stop it and start it anew)",
      )
      .option(
        '--compute-mode <mode>',
        'guaranteed (at least its share, and idle time), capped (never more) or isolated (an MPS partition of its own, on hosts that run one; only while the shard holds no GPUs)',
        'guaranteed',
      )
      .action(
        async (
          ref: string,
          percent: string,
          options: { computeMode: string },
          command: Command,
        ) => {
          const share = checkShare(percent, '<percent>', true);
          const mode = checkMode(options.computeMode, share, 'a <percent>, not none');
          const result = await apiFor(command).request(SetShardComputeDocument, {
            id: await shardId(command, ref),
            percent: share,
            mode,
          });
          const s = result.setShardCompute;
          if (globals(command).json) printJson(s);
          else
            process.stdout.write(
              `${s.name} ${s.state}: compute ${s.computeSharePercent === null ? 'default split (no share)' : shareLabel(s.computeSharePercent, s.computeMode)}\n`,
            );
        },
      ),
    [
      'gpushards shards set-compute trainer 25',
      'gpushards shards set-compute server 50 --compute-mode capped',
      'gpushards shards set-compute trainer none',
    ],
  );

  examples(
    shards
      .command('idle')
      .description(
        "shards their team's idle policy reports idle now (no kernel on any GPU): what holds GPU memory and computes nothing; admins see every team's",
      )
      .option('--team <name|id>', 'one team (admins)')
      .action(async (options: { team?: string }, command: Command) => {
        const api = apiFor(command);
        const teamId = await teamIdFor(api, options.team);
        const result = await api.request(ShardsDocument, {
          first: 100,
          idle: true,
          ...(teamId ? { teamId } : {}),
        });
        const rows = result.shards.edges.map((e) => e.node);
        if (globals(command).json) return printJson(rows);
        if (rows.length === 0) return void process.stdout.write('no idle shards\n');
        process.stdout.write(
          `${table(
            ['NAME', 'TEAM', 'HOST', 'IDLE FOR', 'IDLE SINCE', 'HOLDS', 'COMPUTE', 'ID'],
            rows.map((s) => {
              const live = s.gpus.filter((g) => g.releasedAt === null);
              const held = live.reduce((n, g) => n + Number(g.reserved.bytes), 0);
              return [
                s.name,
                s.team.name,
                s.hostId,
                age(s.idleSince),
                s.idleSince,
                `${(held / 2 ** 30).toFixed(2)} GiB on ${live.length} GPU(s)`,
                shareLabel(s.computeSharePercent, s.computeMode),
                s.id,
              ];
            }),
          )}\n`,
        );
      }),
    ['gpushards shards idle', 'gpushards shards idle --json | jq -r ".[].id"'],
  );
}
