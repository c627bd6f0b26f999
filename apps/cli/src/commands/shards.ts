import { Command, Option } from 'commander';
import { CliError, EXIT } from '../exit-codes.js';
import { apiFor, examples, globals, teamIdFor } from '../context.js';
import { age, checkSize, printIds, printJson, table, until, withQuiet } from '../output.js';
import { busyLabel, computeInput, idleLabel, shareLabel, withComputeOptions } from '../compute.js';
import { addComputeCommands } from './compute.js';
import { addElasticCommands, memoryLabel, memoryPlace } from './elastic.js';
import { addEventsCommand } from './events.js';
import {
  CreateShardDocument,
  DeleteShardDocument,
  ShardDocument,
  ShardsDocument,
  ResizeShardDocument,
  ShardEventsDocument,
  ShardNamesDocument,
  StartShardDocument,
  StopShardDocument,
  type ResultOf,
} from '@gpushards/graphql-client';

type Shard = ResultOf<typeof ShardsDocument>['shards']['edges'][number]['node'];

const FINAL = ['RUNNING', 'STOPPED', 'EXITED', 'FAILED', 'LOST', 'DELETED', 'PREEMPTED', 'EXPIRED'];

/** How many GPUs, and which ones while it holds them: "1 (#0)", "2 (#0,#1)"; "1" when it holds none. */
function gpusLabel(count: number, held: readonly { index: number }[]): string {
  return held.length === 0
    ? String(count)
    : `${count} (${held.map((g) => `#${g.index}`).join(',')})`;
}

export function shardRows(shards: readonly Shard[]): string {
  return table(
    [
      'NAME',
      'STATE',
      'TEAM',
      'HOST',
      'GPUS',
      'CAP/GPU',
      'USED',
      'COMPUTE',
      'BUSY',
      'IDLE',
      'AGE',
      'MEMORY',
      'ID',
    ],
    shards.map((s) => {
      const live = s.gpus.filter((g) => g.releasedAt === null);
      const used = live.reduce((n, g) => n + Number(g.used.bytes), 0);
      return [
        s.name,
        s.memory.moved !== null && (s.state === 'SUSPENDING' || s.state === 'RESUMING')
          ? `${s.state} ${s.memory.moved.human}/${s.memory.total?.human ?? '?'}`
          : s.state,
        s.team.name,
        s.hostId,
        gpusLabel(s.gpuCount, live),
        s.limitPerGpu.human,
        live.length > 0 ? `${(used / 2 ** 30).toFixed(2)} GiB` : '-',
        shareLabel(s.computeSharePercent, s.computeMode),
        busyLabel(s.gpus),
        `${idleLabel(s)}${s.idleSince ? ' (reported)' : ''}`,
        age(s.createdAt),
        `${memoryPlace(s.memory)}${s.elastic ? ' (elastic)' : ''}`,
        s.id,
      ];
    }),
  );
}

function describe(shard: Shard & { command?: string[] }): string {
  const lines = [
    `name        ${shard.name}`,
    `id          ${shard.id}`,
    `state       ${shard.state}${shard.failureReason ? ` (${shard.failureReason})` : ''}${shard.exitCode !== null ? ` exit ${shard.exitCode}` : ''}`,
    `team        ${shard.team.name}`,
    `host        ${shard.hostId ?? '-'}`,
    `image       ${shard.image}`,
    `memory      ${shard.memoryPerGpu.human} per GPU × ${shard.gpuCount} = ${shard.totalMemory.human} (cap ${shard.limitPerGpu.human} per GPU)`,
    `compute     ${shard.computeSharePercent === null ? 'no share (the default split of what shares leave)' : `${shareLabel(shard.computeSharePercent, shard.computeMode)} of each GPU`}`,
    `memory at   ${memoryLabel(shard.memory)}${shard.elastic ? ' (elastic)' : ''}${shard.memory.lastError ? `; last move failed: ${shard.memory.lastError}` : ''}`,
    `activity    busy ${busyLabel(shard.gpus)}, no kernel for ${idleLabel(shard)}${shard.idleSince ? ` (reported idle since ${shard.idleSince})` : ''}`,
    `created     ${shard.createdAt} (${age(shard.createdAt)} ago)`,
    ...queueLines(shard),
  ];
  if (shard.gpus.length > 0) {
    lines.push(
      '',
      table(
        ['GPU', 'MODEL', 'RESERVED', 'USED', 'REAL', 'BUSY', 'LAST KERNEL', 'RELEASED'],
        shard.gpus.map((g) => [
          g.index,
          g.model,
          g.reserved.human,
          g.used.human,
          g.real?.human ?? '-',
          g.busyRatio === null ? '-' : `${Math.round(g.busyRatio * 100)}%`,
          g.lastKernelAt ? `${age(g.lastKernelAt)} ago` : g.busyRatio === null ? '-' : 'never',
          g.releasedAt ?? '-',
        ]),
      ),
    );
  }
  return lines.join('\n');
}

/** Where a PENDING shard stands in the queue, and when it is expected to start. */
function queueLines(shard: Shard): string[] {
  if (shard.state !== 'PENDING') return [];
  return [
    `queue       ${shard.queuePosition === null ? 'not yet placed in order' : `position ${shard.queuePosition}`}: ${shard.queueReason ?? 'the next admission pass decides'}`,
    `starts      ${shard.queueEstimatedStart === null ? 'no estimate (it waits on its team, or the queue has not placed enough lately to tell)' : `${until(shard.queueEstimatedStart)} (an estimate, at ${shard.queueEstimatedStart})`}`,
  ];
}

/** The line `create` answers with: where it runs, or where it waits. */
function createdLine(shard: Shard): string {
  if (shard.state !== 'PENDING') {
    return `${shard.name} ${shard.state} on ${shard.hostId ?? '-'} (${shard.id})`;
  }
  const position = shard.queuePosition === null ? '' : `, position ${shard.queuePosition}`;
  const start =
    shard.queueEstimatedStart === null ? '' : `; starts ${until(shard.queueEstimatedStart)}`;
  return `${shard.name} PENDING${position}: ${shard.queueReason ?? 'queued'}${start} (${shard.id})`;
}

/** A shard named by id or by name (names are unique per team among listed shards). */
async function shardId(command: Command, ref: string): Promise<string> {
  if (/^[0-9a-f]{8}-[0-9a-f]{4}-/i.test(ref)) return ref;
  const api = apiFor(command);
  const found = await api.request(ShardNamesDocument, { first: 200 });
  const matches = found.shards.edges.filter(
    (e) => e.node.name === ref && e.node.state !== 'DELETED',
  );
  if (matches.length === 0)
    throw new CliError(`no shard named "${ref}"`, EXIT.NOT_FOUND, 'NOT_FOUND');
  if (matches.length > 1) {
    throw new CliError(
      `${matches.length} shards are named "${ref}": give the id`,
      EXIT.USAGE,
      'BAD_USER_INPUT',
      matches.map((m) => `${m.node.id} (${m.node.team.name}, ${m.node.state})`),
    );
  }
  return matches[0]!.node.id;
}

function show(command: Command, shard: Shard, line: string): void {
  if (printIds(command, [shard.id])) return;
  if (globals(command).json) printJson(shard);
  else process.stdout.write(`${line}\n`);
}

export function shardsCommand(): Command {
  const shards = new Command('shards')
    .alias('shard')
    .description(
      'list, create, stop, start, delete, suspend, resume, resize (memory or compute share) and wait for shards; idle ones',
    );

  examples(
    withQuiet(shards.command('ls'))
      .alias('list')
      .description("your team's shards, newest first (admins: every team's)")
      .option('--team <name|id>', 'one team (admins)')
      .option('--state <states>', 'only these states, comma-separated (RUNNING,FAILED)')
      .option('-a, --all', 'include DELETED shards')
      .option('--first <n>', 'how many (newest first)', '50')
      .action(
        async (
          options: { team?: string; state?: string; all?: boolean; first: string },
          command: Command,
        ) => {
          const api = apiFor(command);
          const teamId = await teamIdFor(api, options.team);
          const states = options.state?.split(',').map((s) => s.trim().toUpperCase());
          const result = await api.request(ShardsDocument, {
            first: Number(options.first),
            ...(teamId ? { teamId } : {}),
            ...(states ? { states: states as never } : {}),
          });
          const rows = result.shards.edges
            .map((e) => e.node)
            .filter((s) => options.all || states || s.state !== 'DELETED');
          if (
            printIds(
              command,
              rows.map((s) => s.id),
            )
          )
            return;
          if (globals(command).json) printJson(rows);
          else process.stdout.write(rows.length === 0 ? 'no shards\n' : `${shardRows(rows)}\n`);
        },
      ),
    [
      'gpushards shards ls',
      'gpushards shards ls --state RUNNING -q',
      'gpushards shards ls --state RUNNING --json | jq -r ".[].name"',
    ],
  );

  examples(
    withComputeOptions(
      withQuiet(shards.command('create <name>'))
        .description('place a shard: a container with a hard memory cap on GPUs of one host')
        .requiredOption('-i, --image <image>', 'container image')
        .requiredOption('-m, --memory <size>', 'memory per GPU, like 12g or 1536m (1024-based)')
        .option('-g, --gpus <n>', 'number of GPUs', '1')
        .option('--team <name|id>', 'the team (admins must name one)')
        .option('--model <parts>', 'GPU models to choose from, comma-separated ("H100,A100")')
        .addOption(
          new Option('--policy <policy>', 'placement policy').choices(['BINPACK', 'SPREAD']),
        ),
    )
      .option('-e, --env <NAME=value...>', 'environment variables')
      .option(
        '--elastic',
        "elastic: its GPU memory may be suspended to host RAM while idle to make room, and by a reclaim instead of a stop; it comes back when a process needs the GPU (the team's quota must allow it)",
      )
      .option(
        '--no-queue',
        'refuse at once (exit 6) when no host has room now, instead of waiting in the queue',
      )
      .option('--wait', 'wait until it is RUNNING (exit 9 if it ends otherwise)')
      .option('--timeout <seconds>', 'with --wait: give up after this long', '300')
      .argument('[command...]', 'command and arguments (after --)')
      .action(
        async (
          name: string,
          args: string[],
          options: Record<string, string | string[] | boolean | undefined>,
          command: Command,
        ) => {
          const memory = checkSize(String(options['memory']), '--memory');
          const gpuCount = Number(options['gpus']);
          if (!Number.isInteger(gpuCount) || gpuCount < 1)
            throw new CliError('--gpus: a whole number from 1', EXIT.USAGE);
          const env = ((options['env'] as string[] | undefined) ?? []).map((pair) => {
            const at = pair.indexOf('=');
            if (at < 1) throw new CliError(`--env ${pair}: write NAME=value`, EXIT.USAGE);
            return { name: pair.slice(0, at), value: pair.slice(at + 1) };
          });
          const compute = computeInput(options);
          const api = apiFor(command);
          const teamId = await teamIdFor(api, options['team'] as string | undefined);
          const created = await api.request(CreateShardDocument, {
            input: {
              name,
              image: String(options['image']),
              memoryPerGpu: memory,
              gpuCount,
              ...(teamId ? { teamId } : {}),
              ...(options['model'] ? { gpuModelInclude: String(options['model']).split(',') } : {}),
              ...(options['policy']
                ? { placementPolicy: options['policy'] as 'BINPACK' | 'SPREAD' }
                : {}),
              ...compute.input,
              ...(options['queue'] === false ? { queue: false } : {}),
              ...(options['elastic'] === true ? { elastic: true } : {}),
              ...(env.length > 0 ? { env } : {}),
              ...(args.length > 0 ? { command: args } : {}),
            },
          });
          const shard = created.createShard;
          if (options['wait']) {
            const final = await waitFor(command, shard.id, ['RUNNING'], Number(options['timeout']));
            show(command, final, `${final.name} ${final.state} on ${final.hostId} (${final.id})`);
            return;
          }
          show(command, shard, createdLine(shard));
        },
      ),
    [
      'gpushards shards create trainer -i ghcr.io/org/trainer:1.2 -m 12g',
      'gpushards shards create probe -i gpushards/demo-probe:local -m 4g --wait',
      'gpushards shards create notebook -i jupyter/pytorch-notebook -m 16g --elastic',
      'gpushards shards create server -i ghcr.io/org/server:3 -m 8g --compute 25 --compute-mode capped',
      'gpushards shards create latency -i ghcr.io/org/server:3 -m 8g --compute 30 --compute-mode isolated',
      'gpushards shards create big -i pytorch/pytorch -m 40g -g 2 --model H100 -- python train.py',
      'gpushards shards create now-or-never -i ghcr.io/org/job:1 -m 40g --no-queue',
    ],
  );

  examples(
    withQuiet(shards.command('show <shard>'))
      .alias('get')
      .description('one shard, by name or id, with its GPUs')
      .action(async (ref: string, _options: unknown, command: Command) => {
        const result = await apiFor(command).request(ShardDocument, {
          id: await shardId(command, ref),
        });
        if (printIds(command, [result.shard.id])) return;
        if (globals(command).json) printJson(result.shard);
        else process.stdout.write(`${describe(result.shard)}\n`);
      }),
    [
      'gpushards shards show trainer',
      'gpushards shards show 7b730a1d-… --json',
      'docker ps --filter label=io.gpushards.shard=$(gpushards shards show trainer -q)',
    ],
  );

  examples(
    withQuiet(shards.command('stop <shard>'))
      .description('stop it (SIGTERM, then SIGKILL after the grace period); the container is kept')
      .option('--grace <seconds>', 'seconds between SIGTERM and SIGKILL')
      .option('--wait', 'wait until it has stopped')
      .action(
        async (ref: string, options: { grace?: string; wait?: boolean }, command: Command) => {
          const id = await shardId(command, ref);
          const result = await apiFor(command).request(StopShardDocument, {
            id,
            ...(options.grace ? { grace: Number(options.grace) } : {}),
          });
          let shard = result.stopShard;
          if (options.wait) shard = await waitFor(command, id, ['STOPPED', 'EXITED'], 120);
          show(command, shard, `${shard.name} ${shard.state}`);
        },
      ),
    ['gpushards shards stop trainer', 'gpushards shards stop trainer --grace 30 --wait'],
  );

  examples(
    withQuiet(shards.command('start <shard>'))
      .description(
        'run a shard whose run ended (stopped, exited, failed, preempted, expired) again from its spec: it waits in the queue, keeping its id, name and history',
      )
      .option('--wait', 'wait until it runs')
      .action(async (ref: string, options: { wait?: boolean }, command: Command) => {
        const id = await shardId(command, ref);
        const result = await apiFor(command).request(StartShardDocument, { id });
        let shard = result.startShard;
        if (options.wait) shard = await waitFor(command, id, ['RUNNING'], 300);
        show(command, shard, `${shard.name} ${shard.state}`);
      }),
    ['gpushards shards start trainer', 'gpushards shards start trainer --wait'],
  );

  examples(
    withQuiet(shards.command('rm <shard>'))
      .alias('delete')
      .description('delete it: the container is removed, the record stays (DELETED)')
      .action(async (ref: string, _options: unknown, command: Command) => {
        const result = await apiFor(command).request(DeleteShardDocument, {
          id: await shardId(command, ref),
        });
        show(command, result.deleteShard, `${result.deleteShard.name} ${result.deleteShard.state}`);
      }),
    ['gpushards shards rm trainer'],
  );

  examples(
    withQuiet(shards.command('resize <shard> <size>'))
      .description('a new memory per GPU on the same GPUs')
      .action(async (ref: string, size: string, _options: unknown, command: Command) => {
        const memoryPerGpu = checkSize(size);
        const result = await apiFor(command).request(ResizeShardDocument, {
          id: await shardId(command, ref),
          memoryPerGpu,
        });
        const s = result.resizeShard;
        show(
          command,
          s,
          `${s.name} ${s.state}: ${s.memoryPerGpu.human} per GPU (cap ${s.limitPerGpu.human})`,
        );
      }),
    ['gpushards shards resize trainer 16g'],
  );

  examples(
    withQuiet(shards.command('wait <shard>'))
      .description(
        'wait until the shard reaches a state (default RUNNING); exit 9 if it ends in another',
      )
      .option('--for <states>', 'states to wait for, comma-separated', 'RUNNING')
      .option('--timeout <seconds>', 'give up after this long', '300')
      .action(async (ref: string, options: { for: string; timeout: string }, command: Command) => {
        const wanted = options.for.split(',').map((s) => s.trim().toUpperCase());
        const shard = await waitFor(
          command,
          await shardId(command, ref),
          wanted,
          Number(options.timeout),
        );
        show(command, shard, `${shard.name} ${shard.state}`);
      }),
    [
      'gpushards shards wait trainer',
      'gpushards shards wait trainer --for STOPPED,EXITED --timeout 60',
    ],
  );

  addComputeCommands(shards, shardId);
  addElasticCommands(shards, shardId, waitFor);
  addEventsCommand(shards, shardId);

  return shards;
}

/**
 * Waits through shardEvents (subscribed before the state is read, so no change is missed)
 * until the shard is in one of `wanted`; a final state not wanted, or the timeout, exits 9.
 */
export async function waitFor(
  command: Command,
  id: string,
  wanted: string[],
  timeoutSeconds: number,
  follow?: (shard: Shard) => Error | undefined,
): Promise<Shard> {
  const api = apiFor(command);
  let resolveDone: (shard: Shard) => void = () => undefined;
  let rejectDone: (error: Error) => void = () => undefined;
  const result = new Promise<Shard>((resolve, reject) => {
    resolveDone = resolve;
    rejectDone = reject;
  });
  const judge = (shard: Shard): void => {
    const failed = follow?.(shard);
    if (failed !== undefined) rejectDone(failed);
    else if (wanted.includes(shard.state)) resolveDone(shard);
    else if (FINAL.includes(shard.state) && shard.state !== 'RUNNING') {
      rejectDone(
        new CliError(
          `${shard.name} is ${shard.state}${shard.failureReason ? `: ${shard.failureReason}` : ''}, not ${wanted.join(' or ')}`,
          EXIT.WAIT_FAILED,
          'WAIT_FAILED',
        ),
      );
    }
  };
  const subscription = api.subscribe(ShardEventsDocument, {}, (data) => {
    if (data.shardEvents.shard.id === id) judge(data.shardEvents.shard);
  });
  subscription.done.catch((error: Error) => rejectDone(error));
  const timer = setTimeout(
    () =>
      rejectDone(
        new CliError(
          `timed out after ${timeoutSeconds}s waiting for ${wanted.join(' or ')}`,
          EXIT.WAIT_FAILED,
          'WAIT_FAILED',
        ),
      ),
    timeoutSeconds * 1000,
  );
  // Events say when it changes; a re-read now and then covers the moment before the
  // subscription was registered (level-triggered: a missed event only delays).
  const check = async (): Promise<void> => {
    try {
      judge((await api.request(ShardDocument, { id })).shard);
    } catch (error) {
      rejectDone(error as Error);
    }
  };
  const poll = setInterval(() => void check(), 2000);
  try {
    await check();
    return await result;
  } finally {
    clearInterval(poll);
    clearTimeout(timer);
    subscription.stop();
  }
}
