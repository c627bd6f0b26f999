import { describe, test } from 'node:test';
import assert from 'node:assert/strict';
import fc from 'fast-check';
import { bytes, GiB } from './sizes.js';
import { type Gpu, gpuUuid, type Host, hostId, HOST_STATES, type HostState } from './inventory.js';
import { place } from './placement.js';
import { fleetArb, optionsArb, requestArb } from './testing/placement-arbitraries.js';
import { PLACEMENT_INDEX_SHAPES, PlacementIndex } from './placement-index.js';

type Mutable<T> = { -readonly [K in keyof T]: T[K] };
type MutableHost = Mutable<Omit<Host, 'gpus'>> & { gpus: Mutable<Gpu>[] };

/** A copy the test may change in place, as the control plane's fleet cache does. */
function mutableCopy(fleet: readonly Host[]): MutableHost[] {
  return fleet.map((host) => ({ ...host, gpus: host.gpus.map((gpu) => ({ ...gpu })) }));
}

/** What happens to a fleet between two requests. */
type Step =
  | { readonly kind: 'request'; readonly pick: number; readonly take: boolean }
  | { readonly kind: 'state'; readonly host: number; readonly state: HostState }
  | {
      readonly kind: 'release';
      readonly host: number;
      readonly gpu: number;
      readonly fraction: number;
    };

const stepArb: fc.Arbitrary<Step> = fc.oneof(
  {
    weight: 4,
    arbitrary: fc.record({
      kind: fc.constant('request' as const),
      pick: fc.nat(),
      take: fc.boolean(),
    }),
  },
  {
    weight: 1,
    arbitrary: fc.record({
      kind: fc.constant('state' as const),
      host: fc.nat(),
      state: fc.constantFrom(...HOST_STATES),
    }),
  },
  {
    weight: 1,
    arbitrary: fc.record({
      kind: fc.constant('release' as const),
      host: fc.nat(),
      gpu: fc.nat(),
      fraction: fc.double({ min: 0, max: 1, noNaN: true }),
    }),
  },
);

function host(id: string, reservedGiB: readonly number[]): Host {
  return {
    id: hostId(id),
    name: id,
    state: 'ONLINE',
    labels: {},
    contextOverheadBytes: bytes(0),
    gpus: reservedGiB.map((reserved, index) => ({
      uuid: gpuUuid(`GPU-${id}-${index}`),
      index,
      model: 'NVIDIA H100 80GB HBM3',
      totalBytes: bytes(80 * GiB),
      reservedBytes: bytes(reserved * GiB),
    })),
  };
}

describe('PlacementIndex', () => {
  test('answers as place() does while hosts change in place and are reported', () => {
    fc.assert(
      fc.property(
        fleetArb,
        optionsArb,
        // Few shapes, asked again and again: what the index remembers is what is tested.
        fc.array(requestArb, { minLength: 1, maxLength: 3 }),
        fc.array(stepArb, { minLength: 1, maxLength: 40 }),
        (generated, options, requests, steps) => {
          const fleet = mutableCopy(generated);
          const index = new PlacementIndex(options);
          index.reset(fleet);
          for (const step of steps) {
            switch (step.kind) {
              case 'request': {
                const request = requests[step.pick % requests.length]!;
                const expected = place(request, fleet, options);
                assert.deepEqual(index.place(request), expected);
                if (step.take && expected.kind === 'placed') {
                  const chosen = fleet.find((h) => h.id === expected.hostId)!;
                  for (const gpu of chosen.gpus) {
                    if (expected.gpuUuids.includes(gpu.uuid)) {
                      gpu.reservedBytes = bytes(gpu.reservedBytes + expected.reservedBytesPerGpu);
                    }
                  }
                  index.changed(chosen.id);
                }
                break;
              }
              case 'state': {
                const changed = fleet[step.host % Math.max(1, fleet.length)];
                if (changed === undefined) break;
                changed.state = step.state;
                index.changed(changed.id);
                break;
              }
              case 'release': {
                const changed = fleet[step.host % Math.max(1, fleet.length)];
                const gpu = changed?.gpus[step.gpu % Math.max(1, changed.gpus.length)];
                if (changed === undefined || gpu === undefined) break;
                gpu.reservedBytes = bytes(Math.floor(gpu.reservedBytes * step.fraction));
                index.changed(changed.id);
                break;
              }
              default:
                step satisfies never;
            }
          }
        },
      ),
      { numRuns: 300 },
    );
  });

  test('answers as place() does after more request shapes than it remembers', () => {
    const fleet = [host('a', [10, 20, 30, 40]), host('b', [0, 0, 50, 70]), host('c', [79, 5])];
    const index = new PlacementIndex();
    index.reset(fleet);
    for (let round = 0; round < 2; round++) {
      for (let gib = 1; gib <= PLACEMENT_INDEX_SHAPES + 16; gib++) {
        for (const policy of ['binpack', 'spread'] as const) {
          const request = { bytesPerGpu: bytes(gib * GiB), gpuCount: 1 + (gib % 3), policy };
          assert.deepEqual(index.place(request), place(request, fleet));
        }
      }
    }
  });

  test('a change that is not reported is not seen (why every change must be reported)', () => {
    const fleet = mutableCopy([host('a', [60]), host('b', [0])]);
    const index = new PlacementIndex();
    index.reset(fleet);
    const request = { bytesPerGpu: bytes(10 * GiB), gpuCount: 1 };
    assert.equal((index.place(request) as { hostId: string }).hostId, 'a');
    fleet[0]!.gpus[0]!.reservedBytes = bytes(80 * GiB);
    assert.equal((index.place(request) as { hostId: string }).hostId, 'a');
    index.changed('a');
    assert.equal((index.place(request) as { hostId: string }).hostId, 'b');
    assert.deepEqual(index.place(request), place(request, fleet));
  });

  test('explains every host when nothing fits, as place() does', () => {
    const fleet = [host('a', [80]), { ...host('b', [0]), state: 'CORDONED' as const }];
    const index = new PlacementIndex();
    index.reset(fleet);
    const request = { bytesPerGpu: bytes(GiB), gpuCount: 1 };
    const result = index.place(request);
    assert.equal(result.kind, 'no-fit');
    assert.deepEqual(result, place(request, fleet));
  });

  test('refuses what place() refuses', () => {
    const index = new PlacementIndex();
    index.reset([host('a', [0])]);
    assert.throws(() => index.place({ bytesPerGpu: bytes(GiB), gpuCount: 0 }), RangeError);
    assert.throws(() => index.place({ bytesPerGpu: bytes(0), gpuCount: 1 }), RangeError);
    assert.throws(() => index.reset([host('a', [0]), host('a', [1])]), /unique/);
  });

  test('an empty fleet, and ids it does not know, are no trouble', () => {
    const index = new PlacementIndex();
    index.changed('nowhere');
    const request = { bytesPerGpu: bytes(GiB), gpuCount: 1 };
    assert.deepEqual(index.place(request), place(request, []));
    index.reset([host('a', [0])]);
    index.changed('nowhere');
    assert.equal(index.place(request).kind, 'placed');
  });
});
