import assert from 'node:assert/strict';
import { spawn } from 'node:child_process';
import { once } from 'node:events';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, before, describe, it } from 'node:test';

import { createAgent } from '../create-agent.js';
import type { AgentLink } from '../link/agent-link.js';
import { buildCudaProbe } from '../testing/docker.js';
import { fakeLibraries, nativeArtifacts } from '../testing/native.js';
import { waitFor } from '../testing/processes.js';
import { CudaDriver } from './cuda.js';
import { ListedGpuBackend, NvmlBackend } from './gpu-backends.js';
import { Nvml, NvmlError, NvmlUnavailableError } from './nvml.js';
import {
  decodeProcessUtilization,
  PROCESS_UTILIZATION_SAMPLE_SIZE,
} from './process-utilization.js';

const GiB = 1024 ** 3;
const MiB = 1024 ** 2;
const RESERVED = 512 * MiB;
const work = mkdtempSync(join(tmpdir(), 'gpushards-nvml-'));

/** A link that must never be reached: these agents fail before they connect. */
const unreachableLink: AgentLink = {
  connect: () => Promise.reject(new Error('not reached')),
  register: () => Promise.reject(new Error('not reached')),
  heartbeat: () => Promise.reject(new Error('not reached')),
  publishState: () => Promise.reject(new Error('not reached')),
  publishWake: () => Promise.reject(new Error('not reached')),
  reconcile: () => Promise.reject(new Error('not reached')),
  onCommand: () => Promise.reject(new Error('not reached')),
  onRestored: () => undefined,
  close: () => Promise.resolve(),
};

describe('GPUs through NVML and libcuda (koffi), on native/fakes', () => {
  let nvml: Nvml;

  before(() => {
    // The fakes read their configuration once, when this process first loads them.
    process.env.GPUSHARDS_FAKE_GPUS = 'NVIDIA H100 80GB HBM3:80g,NVIDIA L4:24g';
    process.env.GPUSHARDS_FAKE_STATE = join(work, 'fake-state');
    // What the driver and firmware set aside, as a real card does (480 MiB on an H100).
    process.env.GPUSHARDS_FAKE_RESERVED_BYTES = String(RESERVED);
    nvml = Nvml.open(fakeLibraries().nvml);
  });

  after(() => {
    nvml?.close();
    rmSync(work, { recursive: true, force: true });
  });

  it('reads the count, names, UUIDs, memory, versions and utilization', () => {
    assert.equal(nvml.deviceCount(), 2);
    assert.deepEqual(nvml.device(0), {
      index: 0,
      uuid: 'GPU-fa4e5000-0000-4000-8000-000000000000',
      name: 'NVIDIA H100 80GB HBM3',
      totalBytes: 80 * GiB,
      reservedBytes: RESERVED,
    });
    assert.equal(nvml.device(1).name, 'NVIDIA L4');
    // v1, as the driver gives it: the reserve counts as used.
    assert.deepEqual(nvml.memory(1), {
      totalBytes: 24 * GiB,
      usedBytes: RESERVED,
      freeBytes: 24 * GiB - RESERVED,
    });
    assert.equal(nvml.driverVersion(), '580.159.04');
    assert.equal(nvml.cudaVersion(), '13.0');
    assert.equal(nvml.utilizationPercent(0), 0);
  });

  it("turns a failing call into an error carrying nvmlErrorString's text", () => {
    assert.throws(
      () => nvml.device(7),
      (error: unknown) =>
        error instanceof NvmlError &&
        error.call === 'nvmlDeviceGetHandleByIndex_v2' &&
        /failed: Invalid Argument \(NVML error 2\)/.test(error.message),
    );
  });

  it("measures a CUDA context as NVML's used-memory delta, and gives the memory back", () => {
    const backend = new NvmlBackend(nvml, fakeLibraries().cuda);
    assert.equal(backend.measureContextBytes(), 300 * MiB); // the fake's GPUSHARDS_FAKE_CONTEXT_BYTES default
    assert.deepEqual(
      backend.sample().map((gpu) => gpu.usedBytes),
      [RESERVED, RESERVED],
    );
    assert.deepEqual([...CudaDriver.open(fakeLibraries().cuda).deviceUuids().values()], [0, 1]);
  });

  it("registers what shards can be given: each card's memory less its driver's reserve, which no process can take", async () => {
    const backend = new NvmlBackend(nvml, fakeLibraries().cuda);
    assert.deepEqual(
      backend.gpus.map((gpu) => gpu.totalBytes),
      [80 * GiB - RESERVED, 24 * GiB - RESERVED],
    );
    const take = async (bytes: number) => {
      const holder = spawn(nativeArtifacts().find('fake-hidden-alloc'), ['1', String(bytes)], {
        env: { ...process.env, LD_LIBRARY_PATH: fakeLibraries().dir },
        stdio: 'ignore',
      });
      const [code] = (await once(holder, 'exit')) as [number | null];
      return code;
    };
    assert.equal(await take(24 * GiB - RESERVED + MiB), 2, 'into the reserve: out of memory');
    assert.equal(await take(24 * GiB - RESERVED), 0, 'all of what is registered');
  });

  it('lists the processes holding memory on each GPU, with their bytes (host PIDs)', async () => {
    assert.equal(nvml.listsProcesses, true);
    // Memory libvgpu.so would not see, taken by another process through the fake driver.
    const holder = spawn(
      nativeArtifacts().find('fake-hidden-alloc'),
      ['1', String(96 * MiB), 'hold'],
      {
        env: { ...process.env, LD_LIBRARY_PATH: fakeLibraries().dir },
        stdio: ['ignore', 'pipe', 'inherit'],
      },
    );
    try {
      await new Promise<void>((resolve, reject) => {
        holder.stdout.on('data', (chunk: Buffer) => {
          if (chunk.toString().includes('took')) resolve();
        });
        holder.on('exit', (code) => reject(new Error(`fake-hidden-alloc exited ${code}`)));
      });
      assert.deepEqual(nvml.processes(1), [{ pid: holder.pid, usedBytes: 96 * MiB }]);
      assert.deepEqual(nvml.processes(0), []);
      const backend = new NvmlBackend(nvml, fakeLibraries().cuda);
      assert.deepEqual(backend.processes(), [
        { gpuUuid: nvml.device(1).uuid, pid: holder.pid, bytes: 96 * MiB },
      ]);
    } finally {
      holder.kill('SIGKILL');
      await once(holder, 'exit');
    }
  });

  it("reads each process's utilization (nvmlDeviceGetProcessUtilization): a busy process, then none once it is gone", async () => {
    const probe = buildCudaProbe(join(work, 'cuda-probe'), fakeLibraries().cuda);
    // Nothing ran yet: NVML_ERROR_NOT_FOUND is no error, just no sample.
    assert.deepEqual(nvml.processUtilization(0, 0), []);
    const busy = spawn(probe, ['busy', '0'], {
      env: { ...process.env, LD_LIBRARY_PATH: fakeLibraries().dir },
      stdio: ['ignore', 'pipe', 'inherit'],
    });
    let output = '';
    busy.stdout.on('data', (chunk: Buffer) => (output += chunk.toString()));
    try {
      await waitFor('the probe keeps GPU 0 busy', () =>
        output.includes('"busy":1') ? true : undefined,
      );
      const backend = new NvmlBackend(nvml, fakeLibraries().cuda);
      // Over the last 200 ms (lastSeenTimeStamp: microseconds since the epoch) it ran throughout.
      const samples = backend.processUtilization(0, (Date.now() - 200) * 1000);
      assert.ok(samples !== 'unsupported');
      const own = samples.find((s) => s.pid === busy.pid);
      assert.ok(own !== undefined && own.smPercent >= 50, JSON.stringify(samples));
      assert.ok(Math.abs(own.timestampUs / 1000 - Date.now()) < 60_000, 'a time since the epoch');
      assert.deepEqual(backend.processUtilization(1, 0), [], 'nothing ran on GPU 1');
    } finally {
      busy.kill('SIGKILL');
      await once(busy, 'exit');
    }
    assert.deepEqual(nvml.processUtilization(0, 0), [], 'a dead process is not reported');
    assert.equal(
      new ListedGpuBackend('box-1', [{ model: 'Sim', totalBytes: GiB }]).processUtilization(),
      'unsupported',
    );
  });

  it('decodes nvmlProcessUtilizationSample_t (32 bytes: pid, padding, timeStamp, four utilizations)', () => {
    const buffer = Buffer.alloc(PROCESS_UTILIZATION_SAMPLE_SIZE * 3);
    const put = (i: number, pid: number, stamp: bigint, sm: number) => {
      const base = i * PROCESS_UTILIZATION_SAMPLE_SIZE;
      buffer.writeUInt32LE(pid, base);
      buffer.writeBigUInt64LE(stamp, base + 8);
      buffer.writeUInt32LE(sm, base + 16);
      buffer.writeUInt32LE(99, base + 20); // memUtil: not read
    };
    put(0, 4242, 1_795_000_000_000_000n, 68);
    put(1, 0, 1n, 50); // no pid: skipped
    put(2, 7, 1_795_000_000_000_001n, 250); // past 100: held at 100
    assert.deepEqual(decodeProcessUtilization(buffer, 3), [
      { pid: 4242, timestampUs: 1_795_000_000_000_000, smPercent: 68 },
      { pid: 7, timestampUs: 1_795_000_000_000_001, smPercent: 100 },
    ]);
    assert.deepEqual(decodeProcessUtilization(buffer, 1).length, 1);
  });

  it('says clearly when there is no NVIDIA library, and how to go on', async () => {
    const missing = join(work, 'no-driver', 'libnvidia-ml.so.1');
    assert.throws(
      () => Nvml.open(missing),
      (error: unknown) =>
        error instanceof NvmlUnavailableError &&
        error.message.includes(`cannot load the NVIDIA management library ${missing}`) &&
        error.message.includes('GPUSHARDS_SIMULATE_GPUS'),
    );
    await assert.rejects(
      createAgent({
        hostId: 'no-gpu-host',
        link: { custom: unreachableLink },
        gpus: { kind: 'nvml', nvmlLibrary: missing },
        interposerPath: nativeArtifacts().interposer,
        stateDir: join(work, 'state'),
        logLevel: 'silent',
      }),
      /cannot load the NVIDIA management library .*GPUSHARDS_SIMULATE_GPUS/s,
    );
  });

  it('simulated GPUs without fake libraries exist only in the agent', () => {
    const listed = new ListedGpuBackend('box-1', [{ model: 'Sim', totalBytes: 8 * GiB }]);
    assert.equal(listed.gpus.length, 1);
    assert.match(
      listed.gpus[0]!.uuid,
      /^GPU-[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$/,
    );
    assert.notEqual(
      listed.gpus[0]!.uuid,
      new ListedGpuBackend('box-2', [{ model: 'Sim', totalBytes: 1 }]).gpus[0]!.uuid,
    );
    assert.equal(listed.measureContextBytes(), 0);
  });
});
