import type { Command } from 'commander';
import { apiFor, examples, globals } from '../context.js';
import { printJson } from '../output.js';
import { CliError, EXIT } from '../exit-codes.js';
import {
  ResumeShardDocument,
  SuspendShardDocument,
  type ResultOf,
} from '@gpushards/graphql-client';

type Shard = ResultOf<typeof SuspendShardDocument>['suspendShard'];
type Memory = Shard['memory'];

/** Waits for the shard to be in `wanted`; `follow` hears every state it passes through. */
export type WaitForShard = (
  command: Command,
  id: string,
  wanted: string[],
  timeoutSeconds: number,
  follow?: (shard: Shard) => Error | undefined,
) => Promise<Shard>;

/** Where a shard's GPU memory is, for people: "GPU", "host RAM (…)", "moving to host RAM 3.0 of 5.6 GiB". */
export function memoryLabel(memory: Memory): string {
  const progress =
    memory.moved !== null && memory.total !== null
      ? ` ${memory.moved.human} of ${memory.total.human}`
      : '';
  const cause = memory.suspendCause === null ? '' : `, by ${memory.suspendCause}`;
  switch (memory.where) {
    case 'GPU':
      return 'GPU';
    case 'MOVING_OUT':
      return `moving to host RAM${progress}${cause}`;
    case 'HOST':
      return `host RAM${memory.moved === null ? '' : ` (${memory.moved.human})`}${cause}${memory.resumeWantedAt === null ? '' : `, resume wanted since ${memory.resumeWantedAt}`}`;
    case 'MOVING_IN':
      return `moving back to the GPU${progress}`;
    default:
      return memory.where;
  }
}

/** Where a shard's GPU memory is, in a table's cell: "GPU", "host RAM", "→ host RAM", "→ GPU". */
export function memoryPlace(memory: Memory): string {
  switch (memory.where) {
    case 'GPU':
      return 'GPU';
    case 'MOVING_OUT':
      return '→ host RAM';
    case 'HOST':
      return 'host RAM';
    case 'MOVING_IN':
      return '→ GPU';
    default:
      return memory.where;
  }
}

/**
 * With --wait: the move's progress on stderr as it goes, and a failed move (the shard back where
 * it was, with the host's reason) ends the wait with exit 9.
 */
function follower(direction: 'suspend' | 'resume'): (shard: Shard) => Error | undefined {
  const moving = direction === 'suspend' ? 'SUSPENDING' : 'RESUMING';
  const back = direction === 'suspend' ? 'RUNNING' : 'SUSPENDED';
  let seen = false;
  let last = '';
  return (shard) => {
    if (shard.state === moving) {
      seen = true;
      const line = memoryLabel(shard.memory);
      if (line !== last) process.stderr.write(`${shard.name} ${shard.state}: ${line}\n`);
      last = line;
    }
    if (seen && shard.state === back && shard.memory.lastError !== null) {
      return new CliError(
        `${shard.name}: the ${direction} failed: ${shard.memory.lastError}`,
        EXIT.WAIT_FAILED,
        'WAIT_FAILED',
      );
    }
    return undefined;
  };
}

function report(command: Command, shard: Shard): void {
  if (globals(command).json) printJson(shard);
  else process.stdout.write(`${shard.name} ${shard.state}: memory ${memoryLabel(shard.memory)}\n`);
}

/** `shards suspend` and `shards resume` (docs/elastic.md), added to the `shards` command. */
export function addElasticCommands(
  shards: Command,
  shardId: (command: Command, ref: string) => Promise<string>,
  waitFor: WaitForShard,
): void {
  examples(
    shards
      .command('suspend <shard>')
      .description(
        "move a running shard's GPU memory to its host's RAM: its GPUs go back to the queue, its processes keep running and wait at their next GPU call, which brings it back (or `shards resume`). Any shard of your team; exit 7 when its host cannot (no checkpoint API, or its host-RAM budget is taken)",
      )
      .option('--wait', 'wait until it is SUSPENDED, showing the move (exit 9 if it fails)')
      .option('--timeout <seconds>', 'with --wait: give up after this long', '600')
      .action(
        async (ref: string, options: { wait?: boolean; timeout: string }, command: Command) => {
          const id = await shardId(command, ref);
          let shard = (await apiFor(command).request(SuspendShardDocument, { id })).suspendShard;
          if (options.wait) {
            // The answer is the first state followed: a move that fails before the wait has
            // read the shard is still told from one that never started.
            const follow = follower('suspend');
            const failed = follow(shard);
            if (failed !== undefined) throw failed;
            shard = await waitFor(command, id, ['SUSPENDED'], Number(options.timeout), follow);
          }
          report(command, shard);
        },
      ),
    ['gpushards shards suspend notebook --wait', 'gpushards shards suspend 3f2a… --json'],
  );

  examples(
    shards
      .command('resume <shard>')
      .description(
        "ask for a suspended shard's GPU memory back: it resumes on its own GPUs as soon as they have room, in queue order (a process of the shard asking for the GPU does the same by itself)",
      )
      .option('--wait', 'wait until it runs again, showing the move (exit 9 if it fails)')
      .option('--timeout <seconds>', 'with --wait: give up after this long', '600')
      .action(
        async (ref: string, options: { wait?: boolean; timeout: string }, command: Command) => {
          const id = await shardId(command, ref);
          let shard = (await apiFor(command).request(ResumeShardDocument, { id })).resumeShard;
          if (options.wait) {
            // The answer is the first state followed: a move that fails before the wait has
            // read the shard is still told from one that never started.
            const follow = follower('resume');
            const failed = follow(shard);
            if (failed !== undefined) throw failed;
            shard = await waitFor(command, id, ['RUNNING'], Number(options.timeout), follow);
          }
          report(command, shard);
        },
      ),
    ['gpushards shards resume notebook --wait'],
  );
}
