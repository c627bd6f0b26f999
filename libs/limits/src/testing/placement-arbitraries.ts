/**
 * fast-check generators of small fleets, requests and options, shared by the placement tests.
 * Fleets mix host states, zones, overheads, models, oversubscription ratios, suspended caps,
 * memory unowned processes hold and GPUs already past capacity, so that every reason and
 * tie-break shows up within a few hundred runs.
 */
import fc from 'fast-check';
import { bytes, GiB, MiB } from '../sizes.js';
import { gpuUuid, type Host, hostId, type HostState } from '../inventory.js';
import type { PlacementOptions, PlacementPolicy, PlacementRequest } from '../placement.js';

const MODELS = ['NVIDIA H100 80GB HBM3', 'NVIDIA A100-SXM4-40GB', 'NVIDIA L4', 'NVIDIA H100 PCIe'];
const TERMS = ['h100', 'A100', 'l4', 'pcie', 'nvidia', 'hbm3'];

const gpuSpecArb = fc.record({
  model: fc.constantFrom(...MODELS),
  totalGiB: fc.constantFrom(16, 24, 40, 80),
  reservedFraction: fc.double({ min: 0, max: 1.2, noNaN: true }),
  overcommitRatio: fc.option(fc.constantFrom(0.9, 1, 1.5, 2), { nil: undefined }),
  suspendedFraction: fc.option(fc.double({ min: 0, max: 1.5, noNaN: true }), { nil: undefined }),
  unownedFraction: fc.option(fc.double({ min: 0, max: 0.5, noNaN: true }), { nil: undefined }),
});

const hostSpecArb = fc.record({
  state: fc.constantFrom<HostState>(
    'ONLINE',
    'ONLINE',
    'ONLINE',
    'OFFLINE',
    'CORDONED',
    'DRAINING',
  ),
  zone: fc.constantFrom('eu', 'us', undefined),
  overheadMiB: fc.option(fc.constantFrom(0, 300, 512, 1024), { nil: undefined }),
  gpus: fc.array(gpuSpecArb, { maxLength: 8 }),
});

export const fleetArb: fc.Arbitrary<Host[]> = fc
  .array(hostSpecArb, { maxLength: 10 })
  .map((specs) =>
    specs.map((spec, i): Host => {
      const id = `host-${String.fromCharCode(97 + ((i * 7) % 26))}${i}`;
      return {
        id: hostId(id),
        name: id,
        state: spec.state,
        labels: spec.zone === undefined ? {} : { zone: spec.zone },
        ...(spec.overheadMiB === undefined
          ? {}
          : { contextOverheadBytes: bytes(spec.overheadMiB * MiB) }),
        gpus: spec.gpus.map((g, index) => {
          const totalBytes = bytes(g.totalGiB * GiB);
          return {
            uuid: gpuUuid(`GPU-${id}-${index}`),
            index,
            model: g.model,
            totalBytes,
            reservedBytes: bytes(Math.floor(totalBytes * g.reservedFraction)),
            ...(g.overcommitRatio === undefined ? {} : { overcommitRatio: g.overcommitRatio }),
            ...(g.suspendedFraction === undefined
              ? {}
              : { suspendedBytes: bytes(Math.floor(totalBytes * g.suspendedFraction)) }),
            ...(g.unownedFraction === undefined
              ? {}
              : { unownedBytes: bytes(Math.floor(totalBytes * g.unownedFraction)) }),
          };
        }),
      };
    }),
  );

export const requestArb: fc.Arbitrary<PlacementRequest> = fc.record({
  bytesPerGpu: fc.integer({ min: 1, max: 90 * GiB }).map(bytes),
  gpuCount: fc.integer({ min: 1, max: 4 }),
  gpuModel: fc.record(
    {
      include: fc.array(fc.constantFrom(...TERMS), { maxLength: 2 }),
      exclude: fc.array(fc.constantFrom(...TERMS), { maxLength: 1 }),
    },
    { requiredKeys: [] },
  ),
  hostSelector: fc.constantFrom<Record<string, string>>({}, { zone: 'eu' }, { zone: 'us' }),
  policy: fc.constantFrom<PlacementPolicy>('binpack', 'spread'),
});

export const optionsArb: fc.Arbitrary<PlacementOptions> = fc.record(
  {
    defaultOverheadBytes: fc.constantFrom(0, 256 * MiB, 512 * MiB).map(bytes),
    defaultOvercommitRatio: fc.constantFrom(1, 1.25, 2),
  },
  { requiredKeys: [] },
);
