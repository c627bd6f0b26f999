import { describe, test } from 'node:test';
import assert from 'node:assert/strict';
import fc from 'fast-check';
import { bytes, GiB } from './sizes.js';
import { gpuUuid, hostId, type Host } from './inventory.js';
import { fleetArb } from './testing/placement-arbitraries.js';
import { RoomIndex } from './room-index.js';

type MutableGpu = { -readonly [K in keyof Host['gpus'][number]]: Host['gpus'][number][K] };
type MutableHost = Omit<Host, 'state' | 'gpus'> & { state: Host['state']; gpus: MutableGpu[] };

/** What the index must answer: the ONLINE hosts with a GPU whose memory left reaches `need`. */
function mayFit(fleet: readonly Host[], need: number): string[] {
  return fleet
    .filter(
      (host) =>
        host.state === 'ONLINE' &&
        host.gpus.some(
          (gpu) => gpu.totalBytes - (gpu.unownedBytes ?? 0) - gpu.reservedBytes >= need,
        ),
    )
    .map((host) => host.id);
}

const changeArb = fc.record({
  host: fc.nat(),
  gpu: fc.nat(),
  what: fc.constantFrom('reserved', 'unowned', 'state'),
  fraction: fc.double({ min: 0, max: 1.1, noNaN: true }),
  state: fc.constantFrom('ONLINE', 'ONLINE', 'CORDONED', 'OFFLINE') as fc.Arbitrary<Host['state']>,
  need: fc.oneof(
    fc.constantFrom(1, 512 * 1024 * 1024, 2 ** 32, 40 * GiB, 79 * GiB),
    fc.integer({ min: 1, max: 100 * GiB }),
  ),
  ask: fc.boolean(),
});

describe('RoomIndex', () => {
  test('names the hosts with room for a need, in the fleet order, as hosts change in place', () => {
    fc.assert(
      fc.property(fleetArb, fc.array(changeArb, { maxLength: 40 }), (generated, changes) => {
        const fleet: MutableHost[] = generated.map((host) => ({
          ...host,
          gpus: host.gpus.map((gpu) => ({ ...gpu })),
        }));
        const index = new RoomIndex();
        index.reset(fleet);
        for (const change of changes) {
          const host = fleet[change.host % Math.max(1, fleet.length)];
          if (host !== undefined) {
            const gpu = host.gpus[change.gpu % Math.max(1, host.gpus.length)];
            if (change.what === 'state') host.state = change.state;
            else if (gpu !== undefined && change.what === 'reserved') {
              gpu.reservedBytes = Math.floor(
                gpu.totalBytes * change.fraction,
              ) as typeof gpu.reservedBytes;
            } else if (gpu !== undefined) {
              gpu.unownedBytes = Math.floor(
                gpu.totalBytes * change.fraction * 0.5,
              ) as typeof gpu.reservedBytes;
            }
            index.changed(host.id);
          }
          if (change.ask) {
            assert.deepEqual(
              index.hostsThatMayFit(change.need).map((h) => h.id),
              mayFit(fleet, change.need),
            );
          }
        }
        for (const need of [1, 40 * GiB, 80 * GiB]) {
          assert.deepEqual(
            index.hostsThatMayFit(need).map((h) => h.id),
            mayFit(fleet, need),
          );
        }
      }),
      { numRuns: 400 },
    );
  });

  test('a need of 0 or less names every host, full or not ONLINE', () => {
    const fleet: Host[] = [
      {
        id: hostId('h1'),
        name: 'h1',
        state: 'CORDONED',
        labels: {},
        gpus: [
          {
            uuid: gpuUuid('GPU-1'),
            index: 0,
            model: 'm',
            totalBytes: bytes(80 * GiB),
            reservedBytes: bytes(80 * GiB),
          },
        ],
      },
    ];
    const index = new RoomIndex();
    index.reset(fleet);
    assert.deepEqual(index.hostsThatMayFit(0), fleet);
    assert.deepEqual(index.hostsThatMayFit(1), []);
  });
});
