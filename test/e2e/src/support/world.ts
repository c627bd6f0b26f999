import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';

import { docker, shardContainers } from './docker.js';
import { SHARD_FIELDS, type ShardView } from './graphql.js';
import { assertConverged, findProblems, Ledger } from './invariants.js';
import { waitFor } from './processes.js';
import { MiB, System } from './system.js';

export interface Team {
  readonly key: string;
  readonly id: string;
  /** A MEMBER token: shards are created and changed as the team, not as the admin. */
  readonly token: string;
}

export interface QuotaInput {
  maxTotal: string;
  maxShards: number;
  maxPerShard: string;
  maxGpusPerShard?: number;
  /** Guaranteed memory ("24g"); left out: none (everything the team holds is borrowed). */
  guarantee?: string;
  /** Part of a GPU model name the guarantee is on ("H100"). */
  guaranteeGpuModel?: string;
  /** The team's shards may be elastic (docs/elastic.md). */
  allowElastic?: boolean;
}

export interface ShardRequest {
  name: string;
  memoryPerGpu: string;
  gpuCount?: number;
  placementPolicy?: 'BINPACK' | 'SPREAD';
  gpuModelInclude?: string[];
  gpuModelExclude?: string[];
  idempotencyKey?: string;
  /** Wait as PENDING when it fits nowhere now; default false (these scenarios expect NO_CAPACITY). */
  queue?: boolean;
  priorityClass?: string;
  computeSharePercent?: number;
  computeMode?: 'GUARANTEED' | 'CAPPED' | 'ISOLATED';
  /** Labels the host must carry ({ tier: 'a100' }). */
  hostSelector?: Record<string, string>;
  /** Default: hold 256 MiB and wait for SIGTERM. */
  command?: string[];
  /** May be suspended to host RAM (docs/elastic.md). */
  elastic?: boolean;
}

export const DEFAULT_HELD = 256 * MiB;

/** The running system plus what the suite made in it: teams, tokens, the shard ledger. */
export class World {
  readonly ledger = new Ledger();
  readonly teams = new Map<string, Team>();

  constructor(readonly system: System) {}

  get tokens() {
    const teams = this.teams;
    return {
      tokenOf: (key: string) => this.team(key).token,
      teamIds: new Map([...teams.values()].map((team) => [team.key, team.id])),
    };
  }

  team(key: string): Team {
    const team = this.teams.get(key);
    if (team === undefined) throw new Error(`no team ${key}`);
    return team;
  }

  /** An admin creates the team, sets its quota and a MEMBER token. */
  async createTeam(key: string, quota: QuotaInput): Promise<Team> {
    const { createTeam } = await this.system.admin<{ createTeam: { id: string } }>(
      `mutation ($name: String!) { createTeam(name: $name) { id } }`,
      { name: `e2e-${key}` },
    );
    await this.system.admin(
      `mutation ($teamId: ID!, $input: QuotaPolicyInput!) {
        setQuotaPolicy(teamId: $teamId, input: $input) { id }
      }`,
      { teamId: createTeam.id, input: quota },
    );
    const { createApiToken } = await this.system.admin<{ createApiToken: { secret: string } }>(
      `mutation ($teamId: ID!) {
        createApiToken(teamId: $teamId, role: MEMBER, name: "e2e member") { secret }
      }`,
      { teamId: createTeam.id },
    );
    const team = { key, id: createTeam.id, token: createApiToken.secret };
    this.teams.set(key, team);
    return team;
  }

  input(request: ShardRequest): Record<string, unknown> {
    return {
      name: request.name,
      image: this.system.image,
      command: request.command ?? ['/e2e-probe', 'hold', String(DEFAULT_HELD)],
      memoryPerGpu: request.memoryPerGpu,
      ...(request.gpuCount !== undefined ? { gpuCount: request.gpuCount } : {}),
      ...(request.placementPolicy ? { placementPolicy: request.placementPolicy } : {}),
      ...(request.gpuModelInclude ? { gpuModelInclude: request.gpuModelInclude } : {}),
      ...(request.gpuModelExclude ? { gpuModelExclude: request.gpuModelExclude } : {}),
      ...(request.idempotencyKey ? { idempotencyKey: request.idempotencyKey } : {}),
      ...(request.priorityClass ? { priorityClass: request.priorityClass } : {}),
      ...(request.computeSharePercent !== undefined
        ? { computeSharePercent: request.computeSharePercent }
        : {}),
      ...(request.computeMode ? { computeMode: request.computeMode } : {}),
      ...(request.hostSelector
        ? {
            hostSelector: Object.entries(request.hostSelector).map(([key, value]) => ({
              key,
              value,
            })),
          }
        : {}),
      ...(request.elastic ? { elastic: true } : {}),
      queue: request.queue ?? false,
    };
  }

  /** createShard as the team (control plane `n`). */
  async createShard(teamKey: string, request: ShardRequest, n: 1 | 2 = 1): Promise<ShardView> {
    const { createShard } = await this.system.as<{ createShard: ShardView }>(
      this.team(teamKey).token,
      `mutation ($input: CreateShardInput!) { createShard(input: $input) { ${SHARD_FIELDS} } }`,
      { input: this.input(request) },
      n,
    );
    return createShard;
  }

  async shard(teamKey: string, id: string, n: 1 | 2 = 1): Promise<ShardView> {
    const { shard } = await this.system.as<{ shard: ShardView }>(
      this.team(teamKey).token,
      `query ($id: ID!) { shard(id: $id) { ${SHARD_FIELDS} } }`,
      { id },
      n,
    );
    return shard;
  }

  async waitForState(
    teamKey: string,
    id: string,
    state: string,
    timeoutMs = 30_000,
    n: 1 | 2 = 1,
  ): Promise<ShardView> {
    let last = '';
    try {
      return await waitFor(
        `shard ${id} ${state}`,
        async () => {
          const shard = await this.shard(teamKey, id, n);
          last = `${shard.state}${shard.failureReason ? ` (${shard.failureReason})` : ''}`;
          return shard.state === state ? shard : undefined;
        },
        timeoutMs,
        250,
      );
    } catch (error) {
      throw new Error(`shard ${id} did not become ${state} in ${timeoutMs} ms; it is ${last}`, {
        cause: error,
      });
    }
  }

  /** Creates, waits for RUNNING, checks its one container, and enters it in the ledger. */
  async runningShard(
    teamKey: string,
    request: ShardRequest,
    n: 1 | 2 = 1,
  ): Promise<ShardView & { hostId: string; containerId: string }> {
    const created = await this.createShard(teamKey, request, n);
    const running = await this.waitForState(teamKey, created.id, 'RUNNING');
    assert.ok(running.hostId !== null && running.containerId !== null, JSON.stringify(running));
    const containers = this.containersOf(running.id);
    assert.equal(containers.length, 1, `one container for ${running.id}`);
    assert.equal(containers[0]!.id, running.containerId);
    assert.equal(containers[0]!.hostId, running.hostId);
    const held =
      request.command === undefined
        ? DEFAULT_HELD
        : request.command[1] === 'hold'
          ? Number(request.command[2])
          : undefined;
    this.ledger.add({
      id: running.id,
      teamKey,
      hostId: running.hostId,
      state: 'RUNNING',
      containerId: running.containerId,
      ...(held !== undefined ? { heldBytes: held } : {}),
    });
    return running as ShardView & { hostId: string; containerId: string };
  }

  /**
   * Enters a RUNNING shard in the ledger with the container Docker runs for it (not the id the
   * control plane reports: the invariants compare the two).
   */
  track(teamKey: string, shard: ShardView, heldBytes: number | undefined = DEFAULT_HELD): void {
    const running = this.containersOf(shard.id).filter((c) => c.state === 'running');
    assert.equal(running.length, 1, `one running container for ${shard.id}`);
    this.ledger.add({
      id: shard.id,
      teamKey,
      hostId: shard.hostId!,
      state: 'RUNNING',
      containerId: running[0]!.id,
      ...(heldBytes !== undefined ? { heldBytes } : {}),
    });
  }

  /** Waits until the heartbeats report `usedBytes` on the shard's first GPU. */
  async waitForUsage(teamKey: string, id: string, usedBytes: string): Promise<void> {
    let last = '';
    try {
      await waitFor(
        `shard ${id} using ${usedBytes}`,
        async () => {
          const shard = await this.shard(teamKey, id);
          last = shard.gpus.find((g) => g.releasedAt === null)?.used.bytes ?? 'nothing';
          return last === usedBytes ? true : undefined;
        },
        15_000,
        250,
      );
    } catch (error) {
      throw new Error(`shard ${id} reports ${last} used, not ${usedBytes}`, { cause: error });
    }
  }

  containersOf(shardId: string) {
    return shardContainers(this.system.hostIds).filter((c) => c.shardId === shardId);
  }

  /** The probe's JSON lines in the container's output. */
  probeOutput(containerId: string): Record<string, number>[] {
    return docker('logs', containerId)
      .split('\n')
      .filter((line) => line.startsWith('{'))
      .map((line) => JSON.parse(line) as Record<string, number>);
  }

  /** One more CUDA process inside the shard: the CUresult of allocating `bytes`. */
  allocateIn(containerId: string, bytes: number): number {
    // A new process needs a CUDA context first: past the cap even that is refused, and the
    // probe then exits 2 with the CUresult in its JSON line.
    const run = spawnSync('docker', ['exec', containerId, '/e2e-probe', 'alloc', String(bytes)], {
      encoding: 'utf8',
    });
    const line = run.stdout.trim().split('\n').pop() ?? '';
    try {
      return (JSON.parse(line) as { result: number }).result;
    } catch {
      throw new Error(`docker exec probe alloc: exit ${run.status}: ${run.stdout}${run.stderr}`);
    }
  }

  /** Shards whose failure a check reported: later checks that would see it again skip them. */
  readonly reportedShards = new Set<string>();

  /** Problems already reported by a failed check: later checks leave them out. */
  readonly knownProblems = new Set<string>();

  async converged(timeoutMs = 30_000): Promise<void> {
    await assertConverged(this.system, this.ledger, this.tokens, this.knownProblems, timeoutMs);
  }

  /**
   * After a failed check the ledger may expect what the check never got to: the suite goes on
   * from the system as it is (states, hosts and containers as they are once transitions have
   * settled), and what is still wrong is carried as known, so that one failure is reported once.
   */
  async rebase(): Promise<void> {
    const transitional = ['PLACED', 'STARTING', 'STOPPING'];
    const states = async () =>
      new Map(
        (
          await this.system.query<{ id: string; state: string; host_id: string | null }>(
            'SELECT id, state::text AS state, host_id FROM shard WHERE id = ANY($1::uuid[])',
            [[...this.ledger.shards.keys()]],
          )
        ).map((row) => [row.id, row]),
      );
    try {
      await waitFor(
        'shards to settle',
        async () =>
          [...(await states()).values()].some((row) => transitional.includes(row.state))
            ? undefined
            : true,
        20_000,
        500,
      );
    } catch {
      // go on with what there is
    }
    const rows = await states();
    const containers = shardContainers(this.system.hostIds);
    for (const expected of this.ledger.shards.values()) {
      const row = rows.get(expected.id);
      if (row === undefined) continue; // lost: stays a problem
      expected.state = row.state;
      expected.hostId = row.host_id ?? expected.hostId;
      const running = containers.find((c) => c.shardId === expected.id && c.state === 'running');
      if (running !== undefined) expected.containerId = running.id;
      else delete expected.containerId;
    }
    const problems = await findProblems(this.system, this.ledger, this.tokens);
    for (const problem of problems) this.knownProblems.add(problem);
    console.log(
      `     (the suite goes on from the system as it is; ${problems.length} problem(s) carried)`,
    );
  }

  /** host key ("a") of a host id. */
  keyOf(hostId: string | null): string {
    for (const key of ['a', 'b', 'c']) if (this.system.hostId(key) === hostId) return key;
    return `?${hostId}`;
  }
}
