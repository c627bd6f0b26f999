// admit() alone, in memory: the bench fleet (1,000 hosts × 8 × 80 GiB GPUs, each full with one
// 79.5 GiB reservation) and --pending shards of 40 GiB waiting behind it; one GPU is freed per
// pass (as a freeing event does) and the pass decided, --passes times. Reports the CPU per pass
// of admit() (the decision only: no database), for the builds given (--dists: libs/limits dist
// folders), side by side in one process run each. A build with AdmissionQueue decides through
// it (the queue kept between passes, told what each pass placed), as the control plane does;
// one with RoomIndex is given one over the fleet, told of each host that changed, as the
// control plane's fleet cache does. The fleet's hosts are changed in place (as in that cache)
// and only the admit() calls are timed.
//   node bench/queue/admit-pass.mjs [--dists libs/limits/dist,/tmp/before/libs/limits/dist]
//        [--labels after,before] [--pending 10000] [--passes 300]
import { printResult, runForResult } from '../child-result.mjs';
import { fileURLToPath } from 'node:url';
import { resolve } from 'node:path';
import { benchOptions, buildOptions } from '../options.mjs';

const options = benchOptions(import.meta.url, {
  options: {
    ...buildOptions('libs/limits/dist', 'libs/limits'),
    pending: {
      type: 'string',
      default: '10000',
      value: 'whole',
      help: 'shards waiting behind the full fleet',
    },
    passes: {
      type: 'string',
      default: '300',
      value: 'count',
      help: 'passes, one freed GPU before each',
    },
    rounds: { type: 'string', default: '2', value: 'count', help: 'rounds; each runs every build' },
    'run-dist': { type: 'string', internal: true },
  },
  example:
    'flock /tmp/bench.lock node bench/queue/admit-pass.mjs --dists libs/limits/dist,/work/before/libs/limits/dist --labels after,before',
});
const GiB = 2 ** 30;
const MiB = 2 ** 20;

async function runOnce(dist) {
  const { admit, AdmissionQueue, RoomIndex } = await import(`${dist}/index.js`);
  // Builds with AdmissionQueue keep the queue between passes, as the control plane does: told
  // once, then of what each pass placed.
  const kept = AdmissionQueue === undefined ? undefined : new AdmissionQueue();
  const hosts = [];
  for (let h = 0; h < 1000; h++) {
    const id = `host-${String(h).padStart(4, '0')}`;
    hosts.push({
      id,
      name: id,
      state: 'ONLINE',
      labels: {},
      gpus: Array.from({ length: 8 }, (_, i) => ({
        uuid: `GPU-${id}-${i}`,
        index: i,
        model: 'NVIDIA H100 80GB HBM3',
        totalBytes: 80 * GiB,
        reservedBytes: 79 * GiB + 512 * MiB,
      })),
    });
  }
  const pending = Array.from({ length: Number(options.pending) }, (_, n) => ({
    id: `00000000-0000-0000-0000-${String(n).padStart(12, '0')}`,
    teamId: 'team',
    request: {
      bytesPerGpu: 40 * GiB,
      gpuCount: 1,
      gpuModel: {},
      hostSelector: {},
      policy: 'binpack',
    },
    priorityRank: 0,
    preemptible: true,
    arrivedAt: 1_000_000 + n,
  }));
  const teams = [{ id: 'team', name: 'bench', guarantee: { bytes: 0 }, decayedGiBHours: 0 }];
  const fleet = hosts;
  const byId = new Map(hosts.map((host) => [host.id, host]));
  const roomIndex = RoomIndex === undefined ? undefined : new RoomIndex();
  roomIndex?.reset(fleet);
  let queue = pending;
  kept?.reset(pending);
  const passes = Number(options.passes);
  let placed = 0;
  let cpuMicros = 0;
  for (let i = 0; i < passes; i++) {
    // A freeing event: the i-th GPU's shard ended.
    const host = hosts[Math.floor(i / 8) % hosts.length];
    const g = i % 8;
    host.gpus[g] = { ...host.gpus[g], reservedBytes: 0 };
    roomIndex?.changed(host.id);
    const cpu0 = process.cpuUsage();
    const plan =
      kept === undefined
        ? admit({ fleet, held: [], pending: queue, teams, now: 2_000_000 })
        : kept.admit({
            fleet,
            held: [],
            teams,
            now: 2_000_000,
            ...(roomIndex === undefined ? {} : { roomIndex }),
          });
    const used = process.cpuUsage(cpu0);
    cpuMicros += used.user + used.system;
    placed += plan.placements.length;
    const ids = new Set(plan.placements.map((p) => p.shardId));
    // What the placement leaves: the GPU reserved again, the shard out of the queue.
    for (const p of plan.placements) {
      const on = byId.get(p.placed.hostId);
      on.gpus = on.gpus.map((gpu) =>
        p.placed.gpuUuids.includes(gpu.uuid)
          ? { ...gpu, reservedBytes: gpu.reservedBytes + p.placed.reservedBytesPerGpu }
          : gpu,
      );
      roomIndex?.changed(on.id);
    }
    if (kept === undefined) queue = queue.filter((s) => !ids.has(s.id));
    else kept.remove(ids);
  }
  return { cpuMsPerPass: cpuMicros / 1000 / passes, placed, passes };
}

if (options['run-dist'] !== undefined) {
  printResult(await runOnce(options['run-dist']));
  process.exit(0);
}
const dists = options.dists.split(',').map((d) => resolve(d));
const labels = options.labels?.split(',') ?? dists;
for (let round = 1; round <= Number(options.rounds); round++) {
  for (const [i, dist] of dists.entries()) {
    const r = await runForResult(fileURLToPath(import.meta.url), [
      ...['--run-dist', dist, '--pending', options.pending, '--passes', options.passes],
    ]);
    console.log(
      JSON.stringify({ build: labels[i], round, ...r, cpuMsPerPass: r.cpuMsPerPass.toFixed(2) }),
    );
  }
}
