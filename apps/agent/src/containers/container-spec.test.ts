import assert from 'node:assert/strict';
import { describe, it } from 'node:test';

import { buildCreateOptions, pullReference, type ContainerPlan } from './container-spec.js';

const plan: ContainerPlan = {
  hostId: 'box-1',
  shardId: 'shard-1',
  teamId: 'team-a',
  image: 'nvcr.io/nvidia/pytorch:24.05-py3',
  command: ['python', 'train.py'],
  env: { HF_HOME: '/cache', CUDA_DEVICE_ORDER: 'FASTEST_FIRST' },
  gpus: [
    { uuid: 'GPU-b', limitBytes: 2048, hostIndex: 3 },
    { uuid: 'GPU-a', limitBytes: 1024, hostIndex: 1 },
  ],
  interposerPath: '/usr/lib/gpushards/libvgpu.so',
  preloadFile: '/var/lib/gpushards/ld.so.preload',
  regionDir: '/var/lib/gpushards/regions/shard-1',
  limitsFile: '/var/lib/gpushards/limits/shard-1',
  pidsLimit: 4096,
  contextBytes: 500,
  simulated: false,
};

describe('buildCreateOptions', () => {
  it('asks the NVIDIA runtime for exactly the shard GPUs, capped in CUDA ordinal order', () => {
    const options = buildCreateOptions(plan);
    assert.equal(options.name, 'gpushards-box-1-shard-1');
    assert.deepEqual(options.Cmd, ['python', 'train.py']);
    assert.deepEqual(options.Env, [
      'CUDA_DEVICE_ORDER=FASTEST_FIRST',
      'HF_HOME=/cache',
      'NVIDIA_VISIBLE_DEVICES=GPU-a,GPU-b',
      'NVIDIA_DRIVER_CAPABILITIES=compute,utility',
      'GPUSHARDS_REGION_PATH=/run/gpushards/region',
      'GPUSHARDS_CONTEXT_BYTES=500',
      'CUDA_DEVICE_MEMORY_LIMIT_0=1024',
      'CUDA_DEVICE_MEMORY_LIMIT_1=2048',
    ]);
    assert.deepEqual(options.HostConfig?.DeviceRequests, [
      { Driver: '', Count: 0, DeviceIDs: ['GPU-a', 'GPU-b'], Capabilities: [['gpu']] },
    ]);
    assert.deepEqual(options.HostConfig?.Binds, [
      '/usr/lib/gpushards/libvgpu.so:/usr/lib/gpushards/libvgpu.so:ro',
      '/var/lib/gpushards/ld.so.preload:/etc/ld.so.preload:ro',
      '/var/lib/gpushards/regions/shard-1:/run/gpushards:rw',
      '/var/lib/gpushards/limits/shard-1:/etc/gpushards/limits:ro',
    ]);
    assert.equal(options.HostConfig?.Privileged, false);
    assert.deepEqual(options.HostConfig?.SecurityOpt, ['no-new-privileges']);
    // Every capability dropped but those an ordinary root image needs; never SYS_ADMIN.
    assert.deepEqual(options.HostConfig?.CapDrop, ['ALL']);
    assert.ok(!options.HostConfig?.CapAdd?.includes('SYS_ADMIN'));
    assert.equal(options.HostConfig?.PidsLimit, 4096);
    // No memory limit: a suspended shard holds its GPU memory in its processes' host memory,
    // which a container limit would let the kernel OOM-kill (docs/agent.md, "Elastic memory").
    assert.equal(options.HostConfig?.Memory, undefined);
    assert.equal(options.HostConfig?.MemorySwap, undefined);
    assert.equal(options.HostConfig?.OomScoreAdj, undefined);
    assert.equal('User' in options, false, "the image's user unless the agent names one");
    assert.equal(buildCreateOptions({ ...plan, user: '1000:1000' }).User, '1000:1000');
    assert.equal(options.Labels?.['io.gpushards.gpus'], 'GPU-a,GPU-b');
  });

  it("mounts the host's compute ledger and names the shard's ledger entry only when the host has one", () => {
    const options = buildCreateOptions({ ...plan, ledgerDir: '/var/lib/gpushards/ledger' });
    assert.ok(options.Env?.includes('GPUSHARDS_LEDGER_DIR=/run/gpushards/ledger'));
    assert.ok(options.Env?.includes('GPUSHARDS_SHARD_ID=shard-1'));
    assert.ok(
      options.HostConfig?.Binds?.includes('/var/lib/gpushards/ledger:/run/gpushards/ledger:rw'),
    );
    const without = buildCreateOptions(plan);
    assert.ok(!without.Env?.some((e) => e.startsWith('GPUSHARDS_SHARD_ID=')));
    assert.ok(!without.HostConfig?.Binds?.some((b) => b.includes('ledger')));
  });

  it("on a host with an MPS partition: the daemon's pipe folder read-only, the shard's MPS percentage in its environment", () => {
    const options = buildCreateOptions({
      ...plan,
      mps: { pipeDir: '/tmp/nvidia-mps', threadPercent: 30 },
    });
    assert.ok(options.HostConfig?.Binds?.includes('/tmp/nvidia-mps:/run/gpushards/mps:ro'));
    assert.ok(options.Env?.includes('CUDA_MPS_PIPE_DIRECTORY=/run/gpushards/mps'));
    assert.ok(options.Env?.includes('CUDA_MPS_ACTIVE_THREAD_PERCENTAGE=30'));
    // Whatever reaches the plan, the agent's values are the ones the container gets.
    const lifted = buildCreateOptions({
      ...plan,
      env: { CUDA_MPS_ACTIVE_THREAD_PERCENTAGE: '100', CUDA_MPS_PIPE_DIRECTORY: '/tmp/own' },
      mps: { pipeDir: '/tmp/nvidia-mps', threadPercent: 60 },
    });
    assert.deepEqual(
      lifted.Env?.filter((e) => e.startsWith('CUDA_MPS_')),
      ['CUDA_MPS_ACTIVE_THREAD_PERCENTAGE=60', 'CUDA_MPS_PIPE_DIRECTORY=/run/gpushards/mps'],
    );
    const without = buildCreateOptions(plan);
    assert.ok(!without.Env?.some((e) => e.startsWith('CUDA_MPS_')));
    assert.ok(!without.HostConfig?.Binds?.some((b) => b.includes('/run/gpushards/mps')));
  });

  it('keeps the image command when the spec gives none', () => {
    const { command: _command, ...withoutCommand } = plan;
    assert.equal('Cmd' in buildCreateOptions(withoutCommand), false);
  });
});

describe('pullReference', () => {
  it('names latest when no tag or digest is given, as docker does', () => {
    assert.equal(pullReference('busybox'), 'busybox:latest');
    assert.equal(pullReference('localhost:5000/team/app'), 'localhost:5000/team/app:latest');
    assert.equal(pullReference('localhost:5000/team/app:v1'), 'localhost:5000/team/app:v1');
    assert.equal(pullReference(`app@sha256:${'a'.repeat(64)}`), `app@sha256:${'a'.repeat(64)}`);
  });
});
