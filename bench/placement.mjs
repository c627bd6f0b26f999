// Placement latency on a synthetic fleet: 1,000 hosts × 8 GPUs, by place() and by a
// PlacementIndex that is told of one changed host before each call (what a placement does).
// Build first (npx nx run limits:build), then: node bench/placement.mjs [placements per case]
import os from 'node:os';
import {
  GiB,
  MiB,
  bytes,
  gpuUuid,
  hostId,
  place,
  PlacementIndex,
} from '../libs/limits/dist/index.js';
import { benchOptions } from './options.mjs';

const HOSTS = 1000;
const GPUS_PER_HOST = 8;
const { placements } = benchOptions(import.meta.url, {
  positionals: [
    { name: 'placements', default: '2000', value: 'count', help: 'placements measured per case' },
  ],
  options: {},
  example: 'node bench/placement.mjs 500',
});
const MEASURED = Number(placements);
const WARMUP = 500;

/** mulberry32: a small seeded generator, so every run builds the same fleet. */
function random(seed) {
  let state = seed >>> 0;
  return () => {
    state = (state + 0x6d2b79f5) >>> 0;
    let t = state;
    t = Math.imul(t ^ (t >>> 15), t | 1);
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  };
}

const MODELS = [
  { model: 'NVIDIA H100 80GB HBM3', gib: 80 },
  { model: 'NVIDIA A100-SXM4-40GB', gib: 40 },
  { model: 'NVIDIA L40S', gib: 48 },
  { model: 'NVIDIA L4', gib: 24 },
];
const STATES = ['ONLINE', 'ONLINE', 'ONLINE', 'ONLINE', 'ONLINE', 'ONLINE', 'OFFLINE', 'CORDONED'];

function buildFleet(seed) {
  const next = random(seed);
  const pick = (items) => items[Math.floor(next() * items.length)];
  return Array.from({ length: HOSTS }, (_, h) => {
    const id = `host-${String(h).padStart(4, '0')}`;
    const { model, gib } = pick(MODELS);
    return {
      id: hostId(id),
      name: id,
      state: pick(STATES),
      labels: { zone: pick(['eu-1', 'eu-2', 'us-1']), rack: `r${h % 40}` },
      gpus: Array.from({ length: GPUS_PER_HOST }, (_, index) => {
        const totalBytes = bytes(gib * GiB);
        // Utilization skewed towards full, as a busy fleet is; whole MiB like real reservations.
        const used = Math.min(1, next() ** 0.5 * 1.05);
        return {
          uuid: gpuUuid(`GPU-${id}-${index}`),
          index,
          model,
          totalBytes,
          reservedBytes: bytes(Math.floor((totalBytes * used) / MiB) * MiB),
        };
      }),
    };
  });
}

const CASES = [
  { name: 'binpack, 1 × 8 GiB (fits)', request: { bytesPerGpu: bytes(8 * GiB), gpuCount: 1 } },
  {
    name: 'spread, 1 × 8 GiB (fits)',
    request: { bytesPerGpu: bytes(8 * GiB), gpuCount: 1, policy: 'spread' },
  },
  {
    name: 'binpack, 4 × 16 GiB H100, zone eu-1 (fits)',
    request: {
      bytesPerGpu: bytes(16 * GiB),
      gpuCount: 4,
      gpuModel: { include: ['h100'] },
      hostSelector: { zone: 'eu-1' },
    },
  },
  {
    name: 'binpack, 8 × 70 GiB (no fit: 1,000 reasons)',
    request: { bytesPerGpu: bytes(70 * GiB), gpuCount: 8 },
  },
  {
    name: 'spread, 2 × 100 GiB (no fit: 1,000 reasons)',
    request: { bytesPerGpu: bytes(100 * GiB), gpuCount: 2, policy: 'spread' },
  },
];

function percentile(sorted, p) {
  return sorted[Math.min(sorted.length - 1, Math.floor((p / 100) * sorted.length))];
}

/** Times `call(i)` MEASURED times after WARMUP untimed calls; `before(i)` runs untimed. */
function measure(call, before = () => {}) {
  let kind;
  for (let i = 0; i < WARMUP; i++) {
    before(i);
    kind = call(i).kind;
  }
  const nanos = new Float64Array(MEASURED);
  for (let i = 0; i < MEASURED; i++) {
    before(WARMUP + i);
    const start = process.hrtime.bigint();
    call(i);
    nanos[i] = Number(process.hrtime.bigint() - start);
  }
  nanos.sort();
  const total = nanos.reduce((a, b) => a + b, 0);
  return {
    kind,
    p50: percentile(nanos, 50) / 1e3,
    p99: percentile(nanos, 99) / 1e3,
    mean: total / MEASURED / 1e3,
    perSecond: MEASURED / (total / 1e9),
  };
}

const fleet = buildFleet(42);
console.log(`placement benchmark: ${HOSTS} hosts × ${GPUS_PER_HOST} GPUs, seed 42`);
console.log(
  `machine: ${os.cpus()[0]?.model ?? 'unknown'} (${os.cpus().length} cores), node ${process.version}`,
);
console.log(
  `${WARMUP} warm-up calls, then ${MEASURED} timed calls per case (process.hrtime.bigint)\n`,
);
console.log(
  'case'.padEnd(48),
  'result'.padEnd(8),
  'p50 µs'.padStart(8),
  'p99 µs'.padStart(8),
  'mean µs'.padStart(8),
  'calls/s'.padStart(9),
);
const index = new PlacementIndex();
index.reset(fleet);
const runs = CASES.flatMap(({ name, request }) => [
  { name, run: () => measure(() => place(request, fleet)) },
  {
    name: `  index, 1 host changed per call`,
    // A different host each time, as if the previous placement had landed there; the host
    // itself is unchanged, so every call sees the same fleet and costs one host's rescoring.
    run: () =>
      measure(
        () => index.place(request),
        (i) => index.changed(fleet[(i * 7919) % HOSTS].id),
      ),
  },
]);
for (const { name, run } of runs) {
  const r = run();
  console.log(
    name.padEnd(48),
    r.kind.padEnd(8),
    r.p50.toFixed(0).padStart(8),
    r.p99.toFixed(0).padStart(8),
    r.mean.toFixed(0).padStart(8),
    r.perSecond.toFixed(0).padStart(9),
  );
}
