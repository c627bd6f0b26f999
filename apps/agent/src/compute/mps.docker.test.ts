import assert from 'node:assert/strict';
import { chmodSync, mkdirSync, mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { createServer, type Server } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, before, describe, it } from 'node:test';

import type { ShardLaunchSpec } from '@gpushards/protocol';
import { pino } from 'pino';

import type { AgentOptions } from '../config/agent-options.js';
import { createAgent, type Agent } from '../create-agent.js';
import { parseSimulatedGpus } from '../gpus/simulated-gpus.js';
import { decodeLimits } from '../limits/limits-file.js';
import { ScriptedControlPlane } from '../testing/control-plane-peer.js';
import { cleanUpDocker, docker, importCudaProbeImage } from '../testing/docker.js';
import { startNatsServer, type TestNatsServer } from '../testing/nats-server.js';
import { fakeLibraries, nativeArtifacts } from '../testing/native.js';
import { waitFor } from '../testing/processes.js';

const GiB = 1024 ** 3;
const HOST = `mps-test-${process.pid}`;
/** A host without a partition, to which an isolated shard is sent all the same. */
const PLAIN_HOST = `mps-plain-${process.pid}`;
const IMAGE = `gpushards-test/mps-probe:${process.pid}`;
const EROFS = 30;

interface MpsProbe {
  pipe: string;
  percent: string;
  control: number;
  connect: number;
  create: number;
  remove: number;
  cuinit: number;
  pipe_after: string;
  percent_after: string;
}

/**
 * A host with an MPS partition (P = 40), in the real Docker engine with the fake driver: the
 * "MPS control daemon" is a unix socket named `control` in a temporary pipe folder. Every
 * shard gets the folder read-only at /run/gpushards/mps and its MPS percentage in its
 * environment and its limits file: an isolated shard its share, any other 100 − P.
 */
describe('MPS partition through the agent (Docker)', () => {
  let nats: TestNatsServer;
  let controlPlane: ScriptedControlPlane;
  let agent: Agent | undefined;
  let plainAgent: Agent | undefined;
  let daemon: Server | undefined;
  let connections = 0;
  const stateDir = mkdtempSync(join(tmpdir(), 'gpushards-mps-'));
  const pipeDir = join(stateDir, 'mps-pipe');
  let gpu0 = '';

  const options = (hostId: string, extra: Partial<AgentOptions>): AgentOptions => ({
    hostId,
    link: { nats: { servers: [nats.url], auth: nats.agent(hostId), requestTimeoutMs: 5000 } },
    gpus: {
      kind: 'simulated',
      gpus: parseSimulatedGpus('1xTest GPU:24g'),
      fakeLibraryDir: fakeLibraries().dir,
    },
    interposerPath: nativeArtifacts().interposer,
    stateDir: join(stateDir, hostId),
    heartbeatSeconds: 3600,
    reconcileSeconds: 3600,
    stopGraceSeconds: 1,
    logLevel: (process.env.GPUSHARDS_TEST_LOG as 'debug' | undefined) ?? 'silent',
    logDestination: pino.destination(2),
    ...extra,
  });

  before(async () => {
    importCudaProbeImage(IMAGE, fakeLibraries().cuda, nativeArtifacts().interposer);
    mkdirSync(pipeDir);
    daemon = createServer((socket) => {
      connections++;
      socket.end();
    });
    await new Promise<void>((resolve) => daemon!.listen(join(pipeDir, 'control'), resolve));
    chmodSync(join(pipeDir, 'control'), 0o777);
    nats = await startNatsServer([HOST, PLAIN_HOST]);
    controlPlane = await ScriptedControlPlane.connect(nats.url, nats.controlPlane);
    agent = await createAgent(options(HOST, { mps: { pipeDir, isolatedPercent: 40 } }));
    plainAgent = await createAgent(options(PLAIN_HOST, {}));
    [gpu0 = ''] = agent.inventory.gpus.map((gpu) => gpu.uuid);
  });

  after(async () => {
    await agent?.stop();
    await plainAgent?.stop();
    await controlPlane?.close();
    await nats?.stop();
    await new Promise((resolve) => (daemon ? daemon.close(resolve) : resolve(undefined)));
    cleanUpDocker([HOST, PLAIN_HOST], [IMAGE]);
    rmSync(stateDir, { recursive: true, force: true });
  });

  const spec = (shardId: string, extra: Partial<ShardLaunchSpec> = {}): ShardLaunchSpec => ({
    shardId,
    teamId: 'team-mps',
    name: shardId,
    image: IMAGE,
    // Reserved: stripped, so the tenant cannot lift its percentage or leave the partition.
    env: { CUDA_MPS_ACTIVE_THREAD_PERCENTAGE: '100', CUDA_MPS_PIPE_DIRECTORY: '/tmp/mine' },
    command: ['/cuda-probe', 'hold', String(GiB / 8)],
    gpus: [{ uuid: gpu0, limitBytes: 2 * GiB }],
    ...extra,
  });
  const limitsOf = (hostId: string, shardId: string) =>
    decodeLimits(readFileSync(join(stateDir, hostId, 'limits', shardId)))[0]!;
  const launch = async (hostId: string, shard: ShardLaunchSpec) => {
    const reply = await controlPlane.command(hostId, { type: 'launch', shard });
    assert.ok(reply.ok && reply.result.type === 'launch', JSON.stringify(reply));
    return reply.result;
  };
  /** A process of the shard (with `env` of its own) looks at the pipe folder, then calls cuInit. */
  const probe = (containerId: string, env: Record<string, string> = {}): MpsProbe =>
    JSON.parse(
      docker(
        'exec',
        ...Object.entries(env).flatMap(([key, value]) => ['-e', `${key}=${value}`]),
        containerId,
        '/cuda-probe',
        'mps',
        '/run/gpushards/mps',
      ),
    ) as MpsProbe;
  const logsOf = (containerId: string, text: string) =>
    waitFor(`${text} in the logs`, () =>
      docker('logs', containerId).includes(text) ? true : undefined,
    );

  it('registers its partition: isolatedComputePermille = P × 10; a host without one sends none', () => {
    const register = (hostId: string) => controlPlane.registers.find((r) => r.hostId === hostId);
    assert.equal(register(HOST)?.host.isolatedComputePermille, 400);
    assert.equal(register(PLAIN_HOST)?.host.isolatedComputePermille, undefined);
  });

  it('an isolated shard at 30 % and a guaranteed one: the pipe folder read-only, their percentages in the environment and the limits file', async () => {
    const isolated = await launch(
      HOST,
      spec('m-isolated', { compute: { sharePermille: 305, mode: 'isolated' } }),
    );
    const shared = await launch(
      HOST,
      spec('m-shared', { compute: { sharePermille: 250, mode: 'guaranteed' } }),
    );
    assert.equal(isolated.state, 'RUNNING');
    assert.equal(shared.state, 'RUNNING');
    const before = connections;
    for (const [result, percent] of [
      [isolated, '30'],
      [shared, '60'],
    ] as const) {
      const found = probe(result.containerId!);
      assert.deepEqual(
        found,
        {
          pipe: '/run/gpushards/mps',
          percent,
          control: 1,
          connect: 0,
          create: EROFS,
          remove: EROFS,
          cuinit: 0,
          pipe_after: '/run/gpushards/mps',
          percent_after: percent,
        },
        `${result.containerId}: an MPS client reaches the daemon, and can neither plant nor remove anything there`,
      );
      // A process that sets its own: libvgpu.so puts the limits file's back at cuInit.
      const own = probe(result.containerId!, {
        CUDA_MPS_ACTIVE_THREAD_PERCENTAGE: '100',
        CUDA_MPS_PIPE_DIRECTORY: '/tmp',
      });
      assert.deepEqual(
        [own.percent, own.cuinit, own.percent_after, own.pipe_after],
        ['100', 0, percent, '/run/gpushards/mps'],
      );
      // The shard's own process: the fake driver made it an MPS client, so libvgpu.so let it on.
      await logsOf(result.containerId!, '{"result":0}');
      const mounts = JSON.parse(
        docker('inspect', '--format', '{{json .Mounts}}', result.containerId!),
      ) as { Source: string; Destination: string; RW: boolean }[];
      const mount = mounts.find((m) => m.Destination === '/run/gpushards/mps');
      assert.equal(mount?.Source, pipeDir);
      assert.equal(mount?.RW, false, 'read-only');
    }
    await waitFor('their connections at the daemon', () =>
      connections >= before + 4 ? true : undefined,
    );
    const isolatedLimits = limitsOf(HOST, 'm-isolated');
    assert.equal(isolatedLimits.mpsThreadPercent, 30);
    assert.equal(isolatedLimits.computeMode, 'isolated');
    assert.equal(isolatedLimits.computeSharePermille, 305);
    const sharedLimits = limitsOf(HOST, 'm-shared');
    assert.equal(sharedLimits.mpsThreadPercent, 60);
    assert.equal(sharedLimits.computeMode, 'guaranteed');

    // A live change (the control plane refuses one, but if it comes): share and mode are
    // rewritten, the MPS percentage the container started with stays.
    const resized = await controlPlane.command(HOST, {
      type: 'resize',
      shardId: 'm-isolated',
      gpus: [{ uuid: gpu0, limitBytes: 2 * GiB }],
      compute: { sharePermille: 200, mode: 'isolated' },
    });
    assert.ok(resized.ok, JSON.stringify(resized));
    assert.equal(limitsOf(HOST, 'm-isolated').computeSharePermille, 200);
    assert.equal(limitsOf(HOST, 'm-isolated').mpsThreadPercent, 30);
  });

  it('a shard without a compute share is an MPS client at 100 − P too', async () => {
    const plain = await launch(HOST, spec('m-none'));
    assert.equal(probe(plain.containerId!).percent, '60');
    assert.equal(limitsOf(HOST, 'm-none').mpsThreadPercent, 60);
    assert.equal(limitsOf(HOST, 'm-none').computeMode, undefined);
  });

  it('an isolated shard larger than the partition, or on a host without one, fails with the reason and never runs', async () => {
    for (const [hostId, shardId, share, reason] of [
      [
        HOST,
        'm-too-big',
        500,
        /an isolated shard of 50% does not fit host .*'s MPS partition of 40%/,
      ],
      [
        PLAIN_HOST,
        'm-nowhere',
        300,
        /an isolated shard needs an MPS partition, and host .* runs none/,
      ],
    ] as const) {
      const result = await launch(
        hostId,
        spec(shardId, { compute: { sharePermille: share, mode: 'isolated' } }),
      );
      assert.equal(result.state, 'FAILED');
      assert.equal(result.containerId, undefined);
      const failed = await controlPlane.waitForState(shardId, 'FAILED');
      assert.match(failed.reason ?? '', reason);
      assert.equal(
        docker('ps', '-aq', '--filter', `label=io.gpushards.shard=${shardId}`),
        '',
        'no container',
      );
    }
    // A shard that asks for no isolation runs on the plain host as before, no MPS in sight.
    const plain = await launch(PLAIN_HOST, spec('m-plain'));
    const found = probe(plain.containerId!);
    // (Its cuInit is not looked at: two simulated agents in one process share the first one's
    // fake NVML, so this host's shards see other GPU UUIDs than it listed.)
    assert.deepEqual(
      [found.pipe, found.percent, found.control, found.pipe_after, found.percent_after],
      ['', '', 0, '', ''],
    );
    assert.equal(limitsOf(PLAIN_HOST, 'm-plain').mpsThreadPercent, undefined);
  });
});
