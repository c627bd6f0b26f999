import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import { mkdtempSync, readFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, before, describe, it } from 'node:test';

import type { ShardLaunchSpec } from '@gpushards/protocol';

import type { Agent } from '../create-agent.js';
import { LIMITS_COMPUTE_TURNS_GPU, LIMITS_HEADER_FIELDS } from '../limits/limits-layout.js';
import type { ScriptedControlPlane } from '../testing/control-plane-peer.js';
import { startDockerAgent, type DockerAgentStack } from '../testing/docker-agent.js';
import { docker } from '../testing/docker.js';
import { waitFor } from '../testing/processes.js';

const GiB = 1024 ** 3;
const HOST = `turns-test-${process.pid}`;
const IMAGE = `gpushards-test/turns-probe:${process.pid}`;
/** Conditions, not sleeps: generous for a loaded CI machine. */
const WAIT_MS = 30_000;

/**
 * A host whose agent runs with GPUSHARDS_COMPUTE_TURNS=gpu, in the real Docker engine with the
 * fake driver: the agent writes the choice into each shard's limits file, and libvgpu.so in the
 * container, which reads no compute setting from the shard's environment, queues the shard's
 * launches behind its gate while a neighbour holds the turn.
 */
describe('turns on the GPU chosen by the agent (Docker)', () => {
  let stack: DockerAgentStack | undefined;
  let controlPlane: ScriptedControlPlane;
  let agent: Agent;
  const stateDir = mkdtempSync(join(tmpdir(), 'gpushards-turns-'));
  let gpu0 = '';

  before(async () => {
    stack = await startDockerAgent({
      hostId: HOST,
      image: IMAGE,
      stateDir,
      gpus: '1xTest GPU:24g',
      options: { computeLedgerDir: join(stateDir, 'ledger'), computeTurns: 'gpu' },
    });
    ({ controlPlane, agent } = stack);
    [gpu0 = ''] = agent.inventory.gpus.map((gpu) => gpu.uuid);
  });

  after(async () => {
    await stack?.stop();
  });

  const launch = async (shardId: string, command: string[], ready: string): Promise<string> => {
    const spec: ShardLaunchSpec = {
      shardId,
      teamId: 'team-turns',
      name: shardId,
      image: IMAGE,
      env: {},
      gpus: [{ uuid: gpu0, limitBytes: 2 * GiB }],
      command,
    };
    const launched = await controlPlane.command(HOST, { type: 'launch', shard: spec });
    assert.ok(launched.ok && launched.result.type === 'launch', JSON.stringify(launched));
    const containerId = launched.result.containerId!;
    await waitFor(
      `${ready} in ${shardId}'s logs`,
      () => (docker('logs', containerId).includes(ready) ? true : undefined),
      WAIT_MS,
    );
    return containerId;
  };
  const turnsOf = (shardId: string) =>
    readFileSync(join(stateDir, 'limits', shardId)).readUInt32LE(
      LIMITS_HEADER_FIELDS.compute_turns.offset,
    );

  it("a shard's launches queue behind its gate while a busy neighbour holds the turn", async () => {
    await launch('t-busy', ['/cuda-probe', 'busy', '0'], '{"busy":1}');
    const gated = await launch('t-gated', ['/cuda-probe', 'hold', String(GiB / 4)], '{"result":0}');
    assert.equal(turnsOf('t-busy'), LIMITS_COMPUTE_TURNS_GPU);
    assert.equal(turnsOf('t-gated'), LIMITS_COMPUTE_TURNS_GPU);
    // Another process of the shard, its statistics on (read inside a shard too), launches
    // while t-busy holds the turn; its environment says nothing about turns.
    const run = spawnSync(
      'docker',
      ['exec', '-e', 'GPUSHARDS_COMPUTE_STATS=1', gated, '/cuda-probe', 'launch', '200'],
      { encoding: 'utf8' },
    );
    assert.match(run.stdout, /"launched":200,"result":0/, run.stderr);
    const queued = /launches queued behind the gate (\d+)/.exec(run.stderr);
    assert.ok(queued !== null, `no statistics: ${run.stderr}`);
    assert.ok(Number(queued[1]) > 0, `nothing queued behind the gate: ${run.stderr}`);
  });
});
