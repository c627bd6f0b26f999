import assert from 'node:assert/strict';
import { mkdirSync, mkdtempSync, rmSync } from 'node:fs';
import { createServer } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, describe, it } from 'node:test';

import { agentOptionsFromEnv, ConfigError } from './env.js';

const GiB = 1024 ** 3;

describe('agentOptionsFromEnv', () => {
  it('needs only a host id, and fills in the defaults', () => {
    const options = agentOptionsFromEnv({
      GPUSHARDS_HOST_ID: 'gpu-box-07',
      GPUSHARDS_HOST_NAME: 'box',
    });
    assert.deepEqual(options, {
      hostId: 'gpu-box-07',
      hostName: 'box',
      labels: {},
      link: { nats: { servers: ['nats://127.0.0.1:4222'] } },
      gpus: { kind: 'nvml', nvmlLibrary: 'libnvidia-ml.so.1', cudaLibrary: 'libcuda.so.1' },
      interposerPath: '/usr/lib/gpushards/libvgpu.so',
      stateDir: '/var/lib/gpushards',
      regionRoot: '/var/lib/gpushards/regions',
      computeTurns: 'gpu',
      heartbeatSeconds: 10,
      reconcileSeconds: 30,
      stopGraceSeconds: 10,
      logLevel: 'info',
      enforcement: {},
      containers: {},
    });
  });

  it('reads the fence settings: sample interval, tolerance, allow-list, container user and PID limit', () => {
    const options = agentOptionsFromEnv({
      GPUSHARDS_HOST_ID: 'box-1',
      GPUSHARDS_SAMPLE_MS: '100',
      GPUSHARDS_CAP_TOLERANCE: '64m',
      GPUSHARDS_GPU_ALLOWED_PROCESSES: 'Xorg,nvidia-smi',
      GPUSHARDS_CONTAINER_USER: '1000:1000',
      GPUSHARDS_CONTAINER_PIDS_LIMIT: '512',
    });
    assert.deepEqual(options.enforcement, {
      intervalMs: 100,
      toleranceBytes: 64 * 1024 ** 2,
      allowedProcesses: ['Xorg', 'nvidia-smi'],
    });
    assert.deepEqual(options.containers, { user: '1000:1000', pidsLimit: 512 });
    assert.throws(
      () =>
        agentOptionsFromEnv({
          GPUSHARDS_HOST_ID: 'b',
          GPUSHARDS_SAMPLE_MS: 'fast',
          GPUSHARDS_CAP_TOLERANCE: 'some',
          GPUSHARDS_CONTAINER_USER: 'root',
          GPUSHARDS_CONTAINER_PIDS_LIMIT: '3',
        }),
      (error: Error) =>
        [
          /GPUSHARDS_SAMPLE_MS must be a whole number of milliseconds/,
          /GPUSHARDS_CONTAINER_USER must be a numeric uid/,
          /GPUSHARDS_CONTAINER_PIDS_LIMIT must be at least 16/,
        ].every((pattern) => pattern.test(error.message)),
    );
    assert.throws(
      () => agentOptionsFromEnv({ GPUSHARDS_HOST_ID: 'b', GPUSHARDS_CAP_TOLERANCE: 'some' }),
      /GPUSHARDS_CAP_TOLERANCE: /,
    );
  });

  it('reads the compute fence window: seconds, 0 for off, a clear error otherwise', () => {
    const read = (value: string) =>
      agentOptionsFromEnv({ GPUSHARDS_HOST_ID: 'b', GPUSHARDS_COMPUTE_FENCE_SECONDS: value })
        .computeFence;
    assert.deepEqual(read('5'), { windowSeconds: 5 });
    assert.deepEqual(read('2.5'), { windowSeconds: 2.5 });
    assert.deepEqual(read('0'), { windowSeconds: 0 });
    assert.equal(agentOptionsFromEnv({ GPUSHARDS_HOST_ID: 'b' }).computeFence, undefined);
    for (const [value, problem] of [
      [
        'soon',
        /GPUSHARDS_COMPUTE_FENCE_SECONDS must be a number of seconds, like 5 \(0 turns the compute fence off\)/,
      ],
      ['-1', /GPUSHARDS_COMPUTE_FENCE_SECONDS must be a number of seconds/],
      [
        '0.5',
        /GPUSHARDS_COMPUTE_FENCE_SECONDS must be 0 \(the compute fence off\) or from 1 to 3600 seconds/,
      ],
      [
        '7200',
        /GPUSHARDS_COMPUTE_FENCE_SECONDS must be 0 \(the compute fence off\) or from 1 to 3600/,
      ],
    ] as const) {
      assert.throws(() => read(value), problem, value);
    }
  });

  it('reads where shards wait for their compute turns: gpu (the default) or cpu', () => {
    const read = (value?: string) =>
      agentOptionsFromEnv({
        GPUSHARDS_HOST_ID: 'b',
        ...(value === undefined ? {} : { GPUSHARDS_COMPUTE_TURNS: value }),
      }).computeTurns;
    assert.equal(read(), 'gpu');
    assert.equal(read(''), 'gpu');
    assert.equal(read('cpu'), 'cpu');
    assert.equal(read('gpu'), 'gpu');
    for (const value of ['fast', 'GPU', ' gpu']) {
      assert.throws(
        () => read(value),
        (error: unknown) => {
          assert.ok(error instanceof ConfigError);
          assert.match(
            error.message,
            new RegExp(`GPUSHARDS_COMPUTE_TURNS must be cpu or gpu .*, got "${value}"`),
          );
          return true;
        },
        value,
      );
    }
  });

  it("reads the suspend budget: a percent of the host's RAM, a size, or 0 (no suspends); and where metrics are served", () => {
    const read = (value: string) =>
      agentOptionsFromEnv({ GPUSHARDS_HOST_ID: 'b', GPUSHARDS_SUSPEND_BUDGET: value })
        .suspendBudget;
    assert.deepEqual(read('50%'), { percentOfRam: 50 });
    assert.deepEqual(read('12.5%'), { percentOfRam: 12.5 });
    assert.deepEqual(read('64g'), { bytes: 64 * GiB });
    assert.deepEqual(read('0'), { bytes: 0 });
    assert.deepEqual(read('0%'), { percentOfRam: 0 });
    assert.equal(agentOptionsFromEnv({ GPUSHARDS_HOST_ID: 'b' }).suspendBudget, undefined);
    assert.throws(
      () => read('150%'),
      /GPUSHARDS_SUSPEND_BUDGET: a percent of the host's RAM is at most 100%/,
    );
    assert.throws(
      () => read('lots'),
      /GPUSHARDS_SUSPEND_BUDGET: must be a percent of the host's RAM \(50%\), a size \(64g\) or 0/,
    );
    const listen = (value: string) =>
      agentOptionsFromEnv({ GPUSHARDS_HOST_ID: 'b', GPUSHARDS_METRICS_LISTEN: value })
        .metricsListen;
    assert.deepEqual(listen('127.0.0.1:9464'), { host: '127.0.0.1', port: 9464 });
    assert.deepEqual(listen('[::1]:9464'), { host: '::1', port: 9464 });
    assert.deepEqual(listen('agent-host:0'), { host: 'agent-host', port: 0 });
    assert.throws(() => listen('9464'), /GPUSHARDS_METRICS_LISTEN must be host:port/);
    assert.throws(
      () => listen('h:99999'),
      /GPUSHARDS_METRICS_LISTEN must have a port of at most 65535/,
    );
  });

  it('reads every setting', () => {
    const options = agentOptionsFromEnv({
      GPUSHARDS_HOST_ID: 'box-1',
      GPUSHARDS_HOST_LABELS: 'zone=dc1, example.com/tier=a100',
      GPUSHARDS_NATS_URL: 'nats://10.0.0.1:4222,nats://10.0.0.2:4222',
      GPUSHARDS_NATS_USER: 'agent-box-1',
      GPUSHARDS_NATS_PASSWORD: 'secret',
      GPUSHARDS_NATS_TIMEOUT_SECONDS: '2.5',
      GPUSHARDS_SIMULATE_GPUS: '1xH100:80g',
      GPUSHARDS_FAKE_LIBRARY_DIR: '/opt/fakes',
      GPUSHARDS_CONTEXT_OVERHEAD: '512m',
      GPUSHARDS_INTERPOSER_PATH: '/opt/gpushards/libvgpu.so',
      GPUSHARDS_STATE_DIR: '/srv/gpushards',
      GPUSHARDS_REGION_ROOT: '/dev/shm/regions',
      GPUSHARDS_HEARTBEAT_SECONDS: '5',
      GPUSHARDS_RECONCILE_SECONDS: '60',
      GPUSHARDS_STOP_GRACE_SECONDS: '20',
      GPUSHARDS_LOG_LEVEL: 'debug',
    });
    assert.deepEqual(options.labels, { zone: 'dc1', 'example.com/tier': 'a100' });
    assert.deepEqual(options.link, {
      nats: {
        servers: ['nats://10.0.0.1:4222', 'nats://10.0.0.2:4222'],
        auth: { kind: 'password', user: 'agent-box-1', password: 'secret' },
        requestTimeoutMs: 2500,
      },
    });
    assert.deepEqual(options.gpus, {
      kind: 'simulated',
      gpus: [{ model: 'H100', totalBytes: 80 * GiB }],
      fakeLibraryDir: '/opt/fakes',
    });
    assert.equal(options.contextOverheadBytes, 512 * 1024 ** 2);
    assert.equal(options.regionRoot, '/dev/shm/regions');
    assert.deepEqual(
      [
        options.heartbeatSeconds,
        options.reconcileSeconds,
        options.stopGraceSeconds,
        options.logLevel,
      ],
      [5, 60, 20, 'debug'],
    );
    assert.deepEqual(
      agentOptionsFromEnv({
        GPUSHARDS_HOST_ID: 'b',
        GPUSHARDS_NATS_NKEY_SEED_FILE: '/etc/gpushards/agent.nk',
      }).link,
      {
        nats: {
          servers: ['nats://127.0.0.1:4222'],
          auth: { kind: 'nkey', seedFile: '/etc/gpushards/agent.nk' },
        },
      },
    );
  });

  it('names every bad variable at once, never echoing a password', () => {
    assert.throws(
      () =>
        agentOptionsFromEnv({
          GPUSHARDS_HOST_ID: 'bad.host',
          GPUSHARDS_NATS_URL: 'http://x',
          GPUSHARDS_HEARTBEAT_SECONDS: '0',
          GPUSHARDS_LOG_LEVEL: 'loud',
        }),
      (error: unknown) => {
        assert.ok(error instanceof ConfigError);
        for (const name of [
          'GPUSHARDS_HOST_ID',
          'GPUSHARDS_NATS_URL',
          'GPUSHARDS_HEARTBEAT_SECONDS',
          'GPUSHARDS_LOG_LEVEL',
        ]) {
          assert.match(error.message, new RegExp(name));
        }
        return true;
      },
    );
    assert.throws(() => agentOptionsFromEnv({}), /GPUSHARDS_HOST_ID is required \(this host.s id/);
    const mixed = () =>
      agentOptionsFromEnv({
        GPUSHARDS_HOST_ID: 'b',
        GPUSHARDS_NATS_PASSWORD: 'hunter2',
        GPUSHARDS_SIMULATE_GPUS: '2x24gb',
        GPUSHARDS_CONTEXT_OVERHEAD: 'lots',
        GPUSHARDS_HOST_LABELS: '-bad=1',
      });
    assert.throws(mixed, /GPUSHARDS_NATS_USER and GPUSHARDS_NATS_PASSWORD go together/);
    assert.throws(mixed, /GPUSHARDS_SIMULATE_GPUS: .*ambiguous/);
    assert.throws(mixed, /GPUSHARDS_CONTEXT_OVERHEAD: /);
    assert.throws(mixed, /GPUSHARDS_HOST_LABELS: -bad: label keys must/);
    assert.throws(mixed, (error: Error) => !error.message.includes('hunter2'));
    assert.throws(
      () => agentOptionsFromEnv({ GPUSHARDS_HOST_ID: 'b', GPUSHARDS_FAKE_LIBRARY_DIR: '/x' }),
      /only used with GPUSHARDS_SIMULATE_GPUS/,
    );
    assert.throws(
      () =>
        agentOptionsFromEnv({
          GPUSHARDS_HOST_ID: 'b',
          GPUSHARDS_NATS_CREDS: '/a.creds',
          GPUSHARDS_NATS_NKEY_SEED_FILE: '/a.nk',
        }),
      /set one way to authenticate/,
    );
  });

  describe('the MPS partition', () => {
    const work = mkdtempSync(join(tmpdir(), 'gpushards-env-mps-'));
    const daemon = createServer((socket) => socket.end());
    after(async () => {
      await new Promise((resolve) => daemon.close(resolve));
      rmSync(work, { recursive: true, force: true });
    });
    const read = (vars: Record<string, string>) =>
      agentOptionsFromEnv({ GPUSHARDS_HOST_ID: 'box-1', ...vars });

    it("reads the pipe folder and P where the control daemon's socket is", async () => {
      const pipeDir = join(work, 'nvidia-mps');
      mkdirSync(pipeDir);
      await new Promise<void>((resolve) => daemon.listen(join(pipeDir, 'control'), resolve));
      const options = read({
        GPUSHARDS_MPS_PIPE_DIR: pipeDir,
        GPUSHARDS_MPS_ISOLATED_PERCENT: '40',
      });
      assert.deepEqual(options.mps, { pipeDir, isolatedPercent: 40 });
      assert.equal('mps' in read({}), false, 'no partition unless asked');
      assert.equal(
        read({ GPUSHARDS_MPS_PIPE_DIR: pipeDir, GPUSHARDS_MPS_ISOLATED_PERCENT: '90' }).mps
          ?.isolatedPercent,
        90,
      );
    });

    it('takes both settings or neither', () => {
      assert.throws(
        () => read({ GPUSHARDS_MPS_PIPE_DIR: join(work, 'nvidia-mps') }),
        (error: Error) =>
          error instanceof ConfigError &&
          /GPUSHARDS_MPS_PIPE_DIR and GPUSHARDS_MPS_ISOLATED_PERCENT go together: set both .* or neither; only GPUSHARDS_MPS_PIPE_DIR is set/.test(
            error.message,
          ),
      );
      assert.throws(
        () => read({ GPUSHARDS_MPS_ISOLATED_PERCENT: '40' }),
        /go together: .* only GPUSHARDS_MPS_ISOLATED_PERCENT is set/,
      );
    });

    it('refuses a P that is not a whole percent from 1 to 90', () => {
      for (const bad of ['0', '91', '100', '12.5', '40%', 'half']) {
        assert.throws(
          () =>
            read({
              GPUSHARDS_MPS_PIPE_DIR: join(work, 'nvidia-mps'),
              GPUSHARDS_MPS_ISOLATED_PERCENT: bad,
            }),
          /GPUSHARDS_MPS_ISOLATED_PERCENT must be a whole percent from 1 to 90/,
          bad,
        );
      }
    });

    it('refuses a pipe folder where no MPS control daemon runs', () => {
      const empty = join(work, 'empty');
      mkdirSync(empty);
      for (const [folder, what] of [
        [empty, /holds no "control" socket/],
        [join(work, 'absent'), /does not exist/],
      ] as const) {
        assert.throws(
          () => read({ GPUSHARDS_MPS_PIPE_DIR: folder, GPUSHARDS_MPS_ISOLATED_PERCENT: '40' }),
          (error: Error) =>
            error instanceof ConfigError &&
            what.test(error.message) &&
            /GPUSHARDS_MPS_PIPE_DIR: .*the MPS control daemon does not seem to run there; start it with CUDA_MPS_PIPE_DIRECTORY=/.test(
              error.message,
            ),
        );
      }
    });
  });
});
