import { shardContainers } from './docker.js';
import { SHARD_FIELDS, type ShardView } from './graphql.js';
import { waitFor } from './processes.js';
import { System } from './system.js';

/** States that hold a reservation (prisma/schema.prisma, model Shard). */
export const HOLDING = ['PLACED', 'STARTING', 'RUNNING', 'SUSPENDING', 'RESUMING', 'STOPPING'];
/**
 * States that count against the team's quota: also SUSPENDED (its memory is in host RAM, its
 * container runs; docs/elastic.md) and LOST (its container may come back).
 */
export const COUNTED = [...HOLDING, 'SUSPENDED', 'LOST'];
/** A PENDING shard counts against its team's quota too (its container must not run). */
export const QUOTA_COUNTED = [...COUNTED, 'PENDING'];

/** What the suite expects of one shard it created: it may never be lost. */
export interface Expected {
  id: string;
  teamKey: string;
  hostId: string;
  state: string;
  /** Bytes its probe holds on each GPU beyond the CUDA context (undefined: not checked). */
  heldBytes?: number;
  /** The container id while it runs: an adoption keeps it, a relaunch would not. */
  containerId?: string;
}

/** Every shard the suite created, with what it should be now. */
export class Ledger {
  readonly shards = new Map<string, Expected>();

  add(expected: Expected): Expected {
    this.shards.set(expected.id, expected);
    return expected;
  }

  set(id: string, changes: Partial<Expected>): void {
    const current = this.shards.get(id);
    if (current === undefined) throw new Error(`shard ${id} is not in the ledger`);
    Object.assign(current, changes);
  }

  onHost(hostId: string, state = 'RUNNING'): Expected[] {
    return [...this.shards.values()].filter((s) => s.hostId === hostId && s.state === state);
  }
}

interface Tokens {
  tokenOf(teamKey: string): string;
  teamIds: ReadonlyMap<string, string>;
}

/**
 * Everything that must hold between faults, as a list of problems (empty: all hold):
 *
 * - reservations: each GPU's reserved_bytes equals the sum of its live shard_gpu rows; live
 *   rows belong to shards in PLACED/STARTING/RUNNING/STOPPING only, one per GPU of the shard
 *   (gpu_count of them), each of the shard's limit, on GPUs of the shard's host, and none
 *   used beyond what it reserves (the cap is the reservation);
 * - usage adds up: each team's usage (GraphQL) is what its counted shards request, each
 *   host's reserved memory the sum of its GPUs', free = capacity − reserved;
 * - containers: at most one per shard; a RUNNING shard has exactly one, running, on its
 *   host; no container runs for a shard that should not run; DELETED shards have none;
 * - the ledger: no shard the suite created is lost, moved or in another state; a running
 *   one keeps its container (adopted, not relaunched) and reports what its probe holds.
 */
export async function findProblems(
  system: System,
  ledger: Ledger,
  tokens: Tokens,
  { checkUsage = true } = {},
): Promise<string[]> {
  const problems: string[] = [];

  const gpus = await system.query<{ uuid: string; reserved: string; live: string; cap: string }>(
    `SELECT g.uuid, g.reserved_bytes::text AS reserved,
            COALESCE(SUM(sg.reserved_bytes) FILTER (WHERE sg.released_at IS NULL), 0)::text AS live,
            floor(g.total_bytes * g.overcommit_ratio)::bigint::text AS cap
       FROM gpu g LEFT JOIN shard_gpu sg ON sg.gpu_uuid = g.uuid
      GROUP BY g.uuid ORDER BY g.uuid`,
  );
  for (const gpu of gpus) {
    if (gpu.reserved !== gpu.live) {
      problems.push(
        `GPU ${gpu.uuid}: reserved_bytes ${gpu.reserved} ≠ sum of live reservations ${gpu.live}`,
      );
    }
    if (BigInt(gpu.reserved) > BigInt(gpu.cap)) {
      problems.push(`GPU ${gpu.uuid}: reserved ${gpu.reserved} > capacity ${gpu.cap}`);
    }
  }

  const shards = await system.query<{
    id: string;
    state: string;
    host_id: string | null;
    team_id: string;
    container_id: string | null;
    gpu_count: number;
    limit: string;
    requested: string;
    live: string;
    bad_size: string;
    off_host: string;
    over_cap: string;
  }>(
    `SELECT s.id, s.state::text AS state, s.host_id, s.team_id, s.gpu_count, s.container_id,
            s.limit_bytes_per_gpu::text AS limit,
            (s.bytes_per_gpu * s.gpu_count)::text AS requested,
            COUNT(sg.*) FILTER (WHERE sg.released_at IS NULL)::text AS live,
            COUNT(sg.*) FILTER (WHERE sg.released_at IS NULL
                                  AND sg.reserved_bytes <> s.limit_bytes_per_gpu)::text AS bad_size,
            COUNT(sg.*) FILTER (WHERE sg.released_at IS NULL
                                  AND g.host_id IS DISTINCT FROM s.host_id)::text AS off_host,
            COUNT(sg.*) FILTER (WHERE sg.released_at IS NULL
                                  AND sg.used_bytes > sg.reserved_bytes)::text AS over_cap
       FROM shard s
       LEFT JOIN shard_gpu sg ON sg.shard_id = s.id
       LEFT JOIN gpu g ON g.uuid = sg.gpu_uuid
      GROUP BY s.id`,
  );
  const byId = new Map(shards.map((s) => [s.id, s]));
  for (const shard of shards) {
    const holding = HOLDING.includes(shard.state);
    const live = Number(shard.live);
    if (holding && live !== shard.gpu_count) {
      problems.push(
        `shard ${shard.id} (${shard.state}): ${live} live reservations for ${shard.gpu_count} GPU(s)`,
      );
    }
    if (!holding && live !== 0) {
      problems.push(`shard ${shard.id} (${shard.state}) still holds ${live} live reservation(s)`);
    }
    if (shard.bad_size !== '0') {
      problems.push(`shard ${shard.id}: a live reservation differs from its limit ${shard.limit}`);
    }
    if (shard.over_cap !== '0') {
      problems.push(
        `shard ${shard.id} (${shard.state}): uses more than it reserves on ${shard.over_cap} GPU(s) ` +
          `(limit ${shard.limit})`,
      );
    }
    if (shard.off_host !== '0') {
      problems.push(`shard ${shard.id}: a live reservation on a GPU of another host`);
    }
  }

  if (checkUsage) {
    for (const [teamKey, teamId] of tokens.teamIds) {
      const counted = shards.filter((s) => s.team_id === teamId && QUOTA_COUNTED.includes(s.state));
      const expected = counted.reduce((sum, s) => sum + BigInt(s.requested), 0n);
      const count = counted.length;
      const { team } = await system.as<{
        team: { usage: { shardCount: number; reserved: { bytes: string } } };
      }>(
        tokens.tokenOf(teamKey),
        `query ($id: ID!) { team(id: $id) { usage { shardCount reserved { bytes } } } }`,
        { id: teamId },
      );
      if (team.usage.reserved.bytes !== String(expected) || team.usage.shardCount !== count) {
        problems.push(
          `team ${teamKey}: usage says ${team.usage.shardCount} shard(s), ${team.usage.reserved.bytes} B; ` +
            `its shards that count are ${count}, ${expected} B`,
        );
      }
    }
    for (const key of ['a', 'b', 'c']) {
      const host = await system.host(key);
      const sum = host.gpus.reduce((n, gpu) => n + BigInt(gpu.reserved.bytes), 0n);
      if (BigInt(host.memory.reserved.bytes) !== sum) {
        problems.push(`host ${key}: memory.reserved ${host.memory.reserved.bytes} ≠ GPUs' ${sum}`);
      }
      const fromSql = gpus
        .filter((g) => host.gpus.some((hg) => hg.uuid === g.uuid))
        .reduce((n, g) => n + BigInt(g.reserved), 0n);
      if (fromSql !== sum) problems.push(`host ${key}: GraphQL reserved ${sum} ≠ SQL ${fromSql}`);
      for (const gpu of host.gpus) {
        const free = BigInt(gpu.capacity.bytes) - BigInt(gpu.reserved.bytes);
        if (gpu.free.bytes !== String(free < 0n ? 0n : free)) {
          problems.push(
            `host ${key} GPU ${gpu.index}: free ${gpu.free.bytes} ≠ capacity − reserved`,
          );
        }
      }
    }
  }

  const containers = shardContainers(system.hostIds);
  const perShard = new Map<string, typeof containers>();
  for (const container of containers) {
    perShard.set(container.shardId, [...(perShard.get(container.shardId) ?? []), container]);
  }
  for (const [shardId, list] of perShard) {
    if (list.length > 1) {
      problems.push(
        `shard ${shardId}: ${list.length} containers (${list.map((c) => `${c.name} ${c.state}`).join(', ')})`,
      );
    }
    const shard = byId.get(shardId);
    const running = list.filter((c) => c.state === 'running');
    if (shard === undefined) {
      problems.push(`container ${list[0]!.name} belongs to no shard in the database`);
      continue;
    }
    // A LOST shard's host is offline: its container may well still run there.
    if (running.length > 0 && !COUNTED.includes(shard.state)) {
      problems.push(`shard ${shardId} is ${shard.state} but its container runs`);
    }
    if (shard.state === 'DELETED') problems.push(`shard ${shardId} is DELETED but has a container`);
    for (const container of list) {
      if (container.hostId !== shard.host_id) {
        problems.push(
          `shard ${shardId} (host ${shard.host_id}) has a container on ${container.hostId}`,
        );
      }
    }
  }
  for (const shard of shards) {
    if (shard.state !== 'RUNNING') continue;
    const running = (perShard.get(shard.id) ?? []).filter((c) => c.state === 'running');
    if (running.length !== 1) {
      problems.push(`shard ${shard.id} is RUNNING with ${running.length} running container(s)`);
    } else if (shard.container_id !== running[0]!.id) {
      problems.push(
        `shard ${shard.id} is RUNNING with container_id ${shard.container_id ?? 'NULL'}, ` +
          `but its container is ${running[0]!.id.slice(0, 12)}`,
      );
    }
  }

  for (const expected of ledger.shards.values()) {
    const shard = byId.get(expected.id);
    if (shard === undefined) {
      problems.push(`lost: shard ${expected.id} is not in the database`);
      continue;
    }
    if (shard.state !== expected.state || shard.host_id !== expected.hostId) {
      problems.push(
        `shard ${expected.id}: ${shard.state} on ${shard.host_id}, expected ${expected.state} on ${expected.hostId}`,
      );
    }
    if (expected.state === 'RUNNING' && typeof expected.containerId === 'string') {
      const list = perShard.get(expected.id) ?? [];
      if (!list.some((c) => c.id === expected.containerId && c.state === 'running')) {
        problems.push(
          `shard ${expected.id}: its container ${expected.containerId.slice(0, 12)} no longer runs ` +
            `(now: ${list.map((c) => `${c.id.slice(0, 12)} ${c.state}`).join(', ') || 'none'})`,
        );
      }
    }
  }

  if (checkUsage) {
    // What each running probe holds, as the last heartbeat reported it from the shard's region.
    for (const expected of ledger.shards.values()) {
      if (expected.state !== 'RUNNING' || expected.heldBytes === undefined) continue;
      const { shard } = await system.as<{ shard: ShardView }>(
        tokens.tokenOf(expected.teamKey),
        `query ($id: ID!) { shard(id: $id) { ${SHARD_FIELDS} } }`,
        { id: expected.id },
      );
      const overhead = BigInt(shard.limitPerGpu.bytes) - BigInt(shard.memoryPerGpu.bytes);
      const want = String(overhead + BigInt(expected.heldBytes));
      const live = shard.gpus.filter((g) => g.releasedAt === null);
      // The probe allocates on its first GPU only; the others hold nothing.
      const first = live[0];
      if (first === undefined || first.used.bytes !== want) {
        problems.push(
          `shard ${expected.id}: uses ${first?.used.bytes ?? 'nothing'} on its first GPU, its probe holds ${want}`,
        );
      }
    }
  }
  return problems;
}

/**
 * Waits until every invariant holds (faults converge through reconcile), leaving out problems
 * an earlier check already reported (`known`); throws the new ones, which become known.
 */
export async function assertConverged(
  system: System,
  ledger: Ledger,
  tokens: Tokens,
  known: Set<string>,
  timeoutMs = 30_000,
): Promise<void> {
  let last: string[] = [];
  try {
    await waitFor(
      'the invariants',
      async () => {
        last = (await findProblems(system, ledger, tokens)).filter((p) => !known.has(p));
        return last.length === 0 ? true : undefined;
      },
      timeoutMs,
      500,
    );
  } catch (error) {
    if (last.length === 0) throw error;
    for (const problem of last) known.add(problem);
    throw new Error(`after ${timeoutMs} ms, still:\n  - ${last.join('\n  - ')}`, {
      cause: error,
    });
  }
}
