import { describe, test } from 'node:test';
import assert from 'node:assert/strict';
import fc from 'fast-check';
import { type Bytes, bytes, GiB, MiB } from './sizes.js';
import {
  DEFAULT_CONTEXT_OVERHEAD_BYTES,
  type Gpu,
  gpuUuid,
  type Host,
  hostId,
  type HostState,
} from './inventory.js';
import {
  canReserve,
  canResume,
  promiseBytes,
  capacityBytes,
  describeNoFitReason,
  freeBytes,
  matchesGpuModel,
  type NoFit,
  place,
  type Placed,
  type PlacementOptions,
  type PlacementRequest,
  type PlacementResult,
} from './placement.js';
import { fleetArb, optionsArb, requestArb } from './testing/placement-arbitraries.js';

const H100 = 'NVIDIA H100 80GB HBM3';
const A100 = 'NVIDIA A100-SXM4-40GB';
const L4 = 'NVIDIA L4';

interface GpuSpec {
  readonly model?: string;
  readonly totalGiB?: number;
  readonly reservedGiB?: number;
  readonly overcommitRatio?: number;
}

function gpu(host: string, index: number, spec: GpuSpec = {}): Gpu {
  return {
    uuid: gpuUuid(`GPU-${host}-${index}`),
    index,
    model: spec.model ?? H100,
    totalBytes: bytes((spec.totalGiB ?? 80) * GiB),
    reservedBytes: bytes((spec.reservedGiB ?? 0) * GiB),
    ...(spec.overcommitRatio === undefined ? {} : { overcommitRatio: spec.overcommitRatio }),
  };
}

function host(
  id: string,
  gpus: readonly GpuSpec[],
  extra: Partial<Pick<Host, 'state' | 'labels' | 'contextOverheadBytes'>> = {},
): Host {
  return {
    id: hostId(id),
    name: `${id}.example`,
    state: extra.state ?? 'ONLINE',
    labels: extra.labels ?? {},
    ...(extra.contextOverheadBytes === undefined
      ? {}
      : { contextOverheadBytes: extra.contextOverheadBytes }),
    gpus: gpus.map((spec, index) => gpu(id, index, spec)),
  };
}

function request(gib: number, extra: Partial<PlacementRequest> = {}): PlacementRequest {
  return { bytesPerGpu: bytes(gib * GiB), gpuCount: 1, ...extra };
}

function placed(result: PlacementResult): Placed {
  assert.equal(result.kind, 'placed', JSON.stringify(result));
  return result as Placed;
}

function noFit(result: PlacementResult): NoFit {
  assert.equal(result.kind, 'no-fit', JSON.stringify(result));
  return result as NoFit;
}

const overhead = DEFAULT_CONTEXT_OVERHEAD_BYTES;

describe('capacity rule', () => {
  const card = gpu('a', 0, { totalGiB: 80, reservedGiB: 60 });

  test('capacity is the memory less what unowned processes hold, never past floor(total × ratio)', () => {
    assert.equal(capacityBytes(card), 80 * GiB);
    // A ratio above 1 oversubscribes only through suspended (elastic) shards, never on the GPU.
    assert.equal(capacityBytes(card, 1.5), 80 * GiB);
    assert.equal(promiseBytes(card, 1.5), 120 * GiB);
    assert.equal(promiseBytes({ ...card, overcommitRatio: 1.25 }, 2), 100 * GiB);
    assert.equal(capacityBytes({ ...card, totalBytes: bytes(3) }, 0.5), 1);
    assert.equal(capacityBytes({ ...card, unownedBytes: bytes(6 * GiB) }), 74 * GiB);
  });

  test('canReserve: reserved + bytes <= total − unowned and reserved + suspended + bytes <= floor(total × ratio), inclusive', () => {
    assert.equal(canReserve(card, bytes(20 * GiB)), true);
    assert.equal(canReserve(card, bytes(20 * GiB + 1)), false);
    assert.equal(canReserve(card, bytes(20 * GiB + 1), 1.5), false, 'not past the memory');
    const unowned = { ...card, unownedBytes: bytes(4 * GiB) };
    assert.equal(canReserve(unowned, bytes(16 * GiB)), true);
    assert.equal(canReserve(unowned, bytes(16 * GiB + 1)), false);
    const suspended = { ...card, suspendedBytes: bytes(30 * GiB) };
    assert.equal(canReserve(suspended, bytes(1)), false, 'caps past floor(total × 1)');
    assert.equal(canReserve(suspended, bytes(20 * GiB), 1.5), true);
    assert.equal(canReserve(suspended, bytes(20 * GiB), 1.3), false, '60 + 30 + 20 > 104');
  });

  test('canResume: a suspended cap comes back when the memory has room, whatever the ratio', () => {
    const suspended = { ...card, suspendedBytes: bytes(30 * GiB) };
    assert.equal(canResume(suspended, bytes(20 * GiB)), true);
    assert.equal(canResume(suspended, bytes(20 * GiB + 1)), false);
    assert.equal(canResume({ ...suspended, unownedBytes: bytes(1) }, bytes(20 * GiB)), false);
  });

  test('freeBytes never goes below zero when a lowered ratio left the GPU over capacity', () => {
    assert.equal(freeBytes(card), 20 * GiB);
    assert.equal(freeBytes(card, 0.5), 0);
  });

  test('a ratio that is not a positive finite number is refused', () => {
    for (const bad of [0, -1, Number.NaN, Infinity]) {
      assert.throws(() => capacityBytes(card, bad), /overcommit ratio must be a positive finite/);
    }
  });
});

describe('model filter', () => {
  test('case-insensitive substrings: any include, no exclude', () => {
    assert.equal(matchesGpuModel(H100, { include: ['h100'] }), true);
    assert.equal(matchesGpuModel(H100, { include: ['A100', ' H100 '] }), true);
    assert.equal(matchesGpuModel(H100, { include: ['A100'] }), false);
    assert.equal(matchesGpuModel(H100, { exclude: ['hbm3'] }), false);
    assert.equal(matchesGpuModel(H100, { include: ['nvidia'], exclude: ['a100'] }), true);
    assert.equal(matchesGpuModel(H100, { include: [] }), true);
    assert.equal(matchesGpuModel(H100), true);
  });
});

describe('place: where a shard goes', () => {
  test('binpack takes the fullest GPU that fits; spread the emptiest', () => {
    const fleet = [host('a', [{ reservedGiB: 10 }, { reservedGiB: 60 }, { reservedGiB: 70 }])];
    const binpack = placed(place(request(10), fleet));
    assert.deepEqual(binpack.gpuUuids, ['GPU-a-1']);
    const spread = placed(place(request(10, { policy: 'spread' }), fleet));
    assert.deepEqual(spread.gpuUuids, ['GPU-a-0']);
  });

  test('binpack keeps whole hosts free; spread uses them first', () => {
    const fleet = [
      host('empty', [{}, {}]),
      host('busy', [{ reservedGiB: 40 }, { reservedGiB: 40 }]),
    ];
    assert.equal(placed(place(request(8, { gpuCount: 2 }), fleet)).hostId, 'busy');
    const spread = request(8, { gpuCount: 2, policy: 'spread' });
    assert.equal(placed(place(spread, fleet)).hostId, 'empty');
  });

  test('returns the requested size and the cap: requested + the host context overhead', () => {
    const result = placed(place(request(12), [host('a', [{}])]));
    assert.deepEqual(result, {
      kind: 'placed',
      hostId: 'a',
      gpuUuids: ['GPU-a-0'],
      bytesPerGpu: 12 * GiB,
      reservedBytesPerGpu: 12 * GiB + overhead,
    });
    const measured = host('b', [{}], { contextOverheadBytes: bytes(300 * MiB) });
    assert.equal(placed(place(request(12), [measured])).reservedBytesPerGpu, 12 * GiB + 300 * MiB);
    const options = { defaultOverheadBytes: bytes(0) };
    assert.equal(
      placed(place(request(12), [host('c', [{}])], options)).reservedBytesPerGpu,
      12 * GiB,
    );
  });

  test('all GPUs on one host, listed by index', () => {
    const fleet = [
      host('a', [{ reservedGiB: 75 }, {}, {}]),
      host('b', [
        { reservedGiB: 30 },
        { reservedGiB: 75 },
        { reservedGiB: 20 },
        { reservedGiB: 10 },
      ]),
    ];
    const result = placed(place(request(40, { gpuCount: 2 }), fleet));
    assert.equal(result.hostId, 'b');
    assert.deepEqual(result.gpuUuids, ['GPU-b-0', 'GPU-b-2']);
  });

  test('a GPU is filled exactly to its capacity, and not one byte past', () => {
    const fleet = [host('a', [{ reservedGiB: 40 }])];
    const exact = bytes(40 * GiB - overhead);
    assert.equal(placed(place({ bytesPerGpu: exact, gpuCount: 1 }, fleet)).hostId, 'a');
    noFit(place({ bytesPerGpu: bytes(exact + 1), gpuCount: 1 }, fleet));
  });

  test('oversubscription: suspended caps count against the GPU ratio, else the default option', () => {
    const withSuspended = (ratio?: number) => [
      host('a', [{ reservedGiB: 40, ...(ratio === undefined ? {} : { overcommitRatio: ratio }) }]),
    ];
    const suspend = (fleet: Host[]) =>
      fleet.map((h) => ({
        ...h,
        gpus: h.gpus.map((g) => ({ ...g, suspendedBytes: bytes(30 * GiB) })),
      }));
    noFit(place(request(20), suspend(withSuspended())));
    const placedThere = place(request(20), suspend(withSuspended()), {
      defaultOvercommitRatio: 1.5,
    });
    assert.equal(placed(placedThere).hostId, 'a');
    noFit(place(request(20), suspend(withSuspended(1)), { defaultOvercommitRatio: 1.5 }));
    // Never past the memory itself, however large the ratio.
    noFit(place(request(20), [host('a', [{ reservedGiB: 70 }])], { defaultOvercommitRatio: 3 }));
  });

  test('ties go to the smaller host id, then the smaller GPU index', () => {
    const fleet = [host('c', [{}, {}]), host('a', [{}, {}]), host('b', [{}, {}])];
    for (const policy of ['binpack', 'spread'] as const) {
      const result = placed(place(request(10, { policy }), fleet));
      assert.equal(result.hostId, 'a');
      assert.deepEqual(result.gpuUuids, ['GPU-a-0']);
    }
  });

  test('the model filter picks GPUs within a mixed host', () => {
    const fleet = [host('a', [{ model: A100, reservedGiB: 0, totalGiB: 40 }, { model: H100 }])];
    const h100 = placed(place(request(10, { gpuModel: { include: ['h100'] } }), fleet));
    assert.deepEqual(h100.gpuUuids, ['GPU-a-1']);
    const notH100 = placed(place(request(10, { gpuModel: { exclude: ['H100'] } }), fleet));
    assert.deepEqual(notH100.gpuUuids, ['GPU-a-0']);
  });

  test('the host selector must match every label exactly', () => {
    const fleet = [
      host('a', [{}], { labels: { zone: 'eu', tier: 'prod' } }),
      host('b', [{}], { labels: { zone: 'us', tier: 'prod' } }),
    ];
    const selector = { tier: 'prod', zone: 'us' };
    assert.equal(placed(place(request(10, { hostSelector: selector }), fleet)).hostId, 'b');
  });

  test('only ONLINE hosts take shards', () => {
    const states: HostState[] = ['OFFLINE', 'CORDONED', 'DRAINING'];
    const fleet = [...states.map((state) => host(state, [{}], { state })), host('z', [{}])];
    assert.equal(placed(place(request(10), fleet)).hostId, 'z');
  });

  test('a malformed request is a programming error, thrown', () => {
    const fleet = [host('a', [{}])];
    assert.throws(() => place(request(1, { gpuCount: 0 }), fleet), /gpuCount must be a whole/);
    assert.throws(() => place(request(1, { gpuCount: 1.5 }), fleet), /gpuCount must be a whole/);
    assert.throws(() => place({ bytesPerGpu: bytes(0), gpuCount: 1 }, fleet), /bytesPerGpu must/);
    assert.throws(
      () => place(request(1), fleet, { defaultOvercommitRatio: 0 }),
      /overcommit ratio must be/,
    );
    assert.throws(
      () => place(request(1), fleet, { defaultOverheadBytes: -1 as Bytes }),
      /defaultOverheadBytes must be/,
    );
  });
});

describe('place: why nothing fits, per host', () => {
  function onlyReason(fleetHost: Host, req: PlacementRequest) {
    const result = noFit(place(req, [fleetHost]));
    assert.equal(result.reasons.length, 1);
    const [reason] = result.reasons;
    assert.ok(reason !== undefined);
    assert.equal(reason.hostId, fleetHost.id);
    assert.equal(reason.hostName, fleetHost.name);
    return { reason: reason.reason, message: describeNoFitReason(reason.reason) };
  }

  test('host-offline', () => {
    const reason = onlyReason(host('a', [{}], { state: 'OFFLINE' }), request(1));
    assert.deepEqual(reason.reason, { kind: 'host-offline' });
    assert.equal(reason.message, 'host is offline');
  });

  test('host-cordoned', () => {
    const reason = onlyReason(host('a', [{}], { state: 'CORDONED' }), request(1));
    assert.deepEqual(reason.reason, { kind: 'host-cordoned' });
    assert.equal(reason.message, 'host is cordoned: it takes no new shards');
  });

  test('host-draining', () => {
    const reason = onlyReason(host('a', [{}], { state: 'DRAINING' }), request(1));
    assert.deepEqual(reason.reason, { kind: 'host-draining' });
    assert.equal(reason.message, 'host is draining: its shards are being moved off');
  });

  test('label-mismatch: a different value; the first key in sorted order', () => {
    const labelled = host('a', [{}], { labels: { zone: 'eu', tier: 'dev' } });
    const reason = onlyReason(labelled, request(1, { hostSelector: { zone: 'us', tier: 'prod' } }));
    assert.deepEqual(reason.reason, {
      kind: 'label-mismatch',
      key: 'tier',
      wanted: 'prod',
      actual: 'dev',
    });
    assert.equal(reason.message, 'label "tier" is "dev", wanted "prod"');
  });

  test('label-mismatch: a label the host does not carry (inherited keys do not count)', () => {
    const reason = onlyReason(host('a', [{}]), request(1, { hostSelector: { constructor: 'x' } }));
    assert.deepEqual(reason.reason, {
      kind: 'label-mismatch',
      key: 'constructor',
      wanted: 'x',
      actual: null,
    });
    assert.equal(reason.message, 'label "constructor" is not set, wanted "x"');
  });

  test('model-excluded: names the models and the filter', () => {
    const filter = { include: ['H100'], exclude: ['PCIe'] };
    const reason = onlyReason(
      host('a', [{ model: L4 }, { model: A100 }, { model: L4 }]),
      request(1, { gpuModel: filter }),
    );
    assert.deepEqual(reason.reason, { kind: 'model-excluded', models: [A100, L4], filter });
    assert.equal(
      reason.message,
      'no GPU matches the model filter (include "H100"; exclude "PCIe"): ' +
        `this host has ${A100}, ${L4}`,
    );
  });

  test('not-enough-gpus: the numbers per GPU', () => {
    const reason = onlyReason(
      host('a', [{ reservedGiB: 70 }, { reservedGiB: 20 }, { reservedGiB: 80 }]),
      request(12, { gpuCount: 2 }),
    );
    assert.deepEqual(reason.reason, {
      kind: 'not-enough-gpus',
      neededGpus: 2,
      neededBytesPerGpu: 12 * GiB + overhead,
      fittingGpus: 1,
      excludedByModel: 0,
      gpus: [
        { uuid: 'GPU-a-0', index: 0, model: H100, freeBytes: 10 * GiB },
        { uuid: 'GPU-a-1', index: 1, model: H100, freeBytes: 60 * GiB },
        { uuid: 'GPU-a-2', index: 2, model: H100, freeBytes: 0 },
      ],
    });
    assert.equal(
      reason.message,
      'needs 2 GPUs with 12.5 GiB free each, has 1 (free: #0 10 GiB, #1 60 GiB, #2 0 B)',
    );
  });

  test('not-enough-gpus: GPUs left out by the model filter are counted, not listed', () => {
    const reason = onlyReason(
      host('a', [{ model: A100 }, { model: H100, reservedGiB: 79 }, { model: A100 }]),
      request(1, { gpuModel: { include: ['h100'] } }),
    );
    assert.equal(
      reason.message,
      'needs 1 GPU with 1.5 GiB free each, has 0 (free: #1 1 GiB); 2 GPUs left out by the model filter',
    );
  });

  test('not-enough-gpus: a host without GPUs', () => {
    const reason = onlyReason(host('a', []), request(1));
    assert.equal(reason.reason.kind, 'not-enough-gpus');
    assert.equal(reason.message, 'needs 1 GPU with 1.5 GiB free each, has 0 (no GPUs)');
  });

  test('the summary names each host when there are few', () => {
    const fleet = [host('b', [{}], { state: 'OFFLINE' }), host('a', [{ reservedGiB: 79 }])];
    const result = noFit(place(request(4, { gpuCount: 1 }), fleet));
    assert.deepEqual(
      result.reasons.map((r) => r.hostId),
      ['a', 'b'],
    );
    assert.equal(
      result.message,
      'no host can take 1 GPU × 4 GiB (plus context overhead per GPU): ' +
        'a.example: needs 1 GPU with 4.5 GiB free each, has 0 (free: #0 1 GiB); ' +
        'b.example: host is offline',
    );
  });

  test('the summary counts hosts by reason when there are many', () => {
    const fleet = [
      host('a', [{ reservedGiB: 79 }]),
      host('b', [{ reservedGiB: 79 }]),
      host('c', [{ model: L4 }]),
      host('d', [{}], { state: 'OFFLINE' }),
      host('e', [{}], { state: 'DRAINING' }),
      host('f', [{}], { state: 'CORDONED' }),
      host('g', [{}], { labels: { zone: 'eu' } }),
    ];
    const req = request(4, { gpuCount: 2, gpuModel: { exclude: ['L4'] }, hostSelector: {} });
    const labelled = request(4, { ...req, hostSelector: { zone: 'us' } });
    assert.equal(
      noFit(place(req, fleet)).message,
      'no host can take 2 GPUs × 4 GiB (plus context overhead per GPU): of 7 hosts, ' +
        '3 without enough free GPU memory, 1 without a matching GPU model, 1 offline, ' +
        '1 cordoned, 1 draining',
    );
    assert.equal(
      noFit(place(labelled, fleet)).message,
      'no host can take 2 GPUs × 4 GiB (plus context overhead per GPU): of 7 hosts, ' +
        '4 not matching the host selector, 1 offline, 1 cordoned, 1 draining',
    );
  });

  test('an empty fleet', () => {
    assert.equal(
      noFit(place(request(1), [])).message,
      'no host can take 1 GPU × 1 GiB (plus context overhead per GPU): the fleet has no hosts',
    );
  });
});

// ---------------------------------------------------------------- properties

/** A seeded Fisher–Yates shuffle, so a failing case replays. */
function shuffled<T>(items: readonly T[], seed: number): T[] {
  const out = [...items];
  let state = seed >>> 0 || 1;
  for (let i = out.length - 1; i > 0; i--) {
    state = (Math.imul(state, 1103515245) + 12345) >>> 0;
    const j = state % (i + 1);
    [out[i], out[j]] = [out[j]!, out[i]!];
  }
  return out;
}

/** Every way to put the request on the fleet, by brute force over GPU subsets. */
/** The capacity rule as the issue states it: what the GPU can still take. */
function modelRoom(g: Host['gpus'][number], defaultRatio: number): number {
  const resident = g.totalBytes - (g.unownedBytes ?? 0) - g.reservedBytes;
  const promise =
    Math.floor(g.totalBytes * (g.overcommitRatio ?? defaultRatio)) -
    g.reservedBytes -
    (g.suspendedBytes ?? 0);
  return Math.min(resident, promise);
}

function feasibleScores(req: PlacementRequest, fleet: readonly Host[], options: PlacementOptions) {
  const scores: { hostId: string; score: number }[] = [];
  const ratio = options.defaultOvercommitRatio ?? 1;
  const selector = req.hostSelector ?? {};
  for (const h of fleet) {
    if (h.state !== 'ONLINE') continue;
    if (Object.entries(selector).some(([k, v]) => h.labels[k] !== v)) continue;
    const need =
      req.bytesPerGpu + (h.contextOverheadBytes ?? options.defaultOverheadBytes ?? overhead);
    const free = h.gpus
      .filter((g) => matchesGpuModel(g.model, req.gpuModel))
      .map((g) => modelRoom(g, ratio))
      .filter((f) => f >= need);
    for (const subset of subsets(free, req.gpuCount)) {
      scores.push({ hostId: h.id, score: subset.reduce((a, b) => a + b, 0) });
    }
  }
  return scores;
}

function subsets<T>(items: readonly T[], k: number): T[][] {
  if (k === 0) return [[]];
  if (items.length < k) return [];
  const [first, ...rest] = items as [T, ...T[]];
  return [...subsets(rest, k - 1).map((s) => [first, ...s]), ...subsets(rest, k)];
}

describe('place (properties)', () => {
  test('no placement takes a GPU past its memory less unowned, nor its caps past floor(total × ratio)', () => {
    fc.assert(
      fc.property(fleetArb, requestArb, optionsArb, (fleet, req, options) => {
        const result = place(req, fleet, options);
        if (result.kind === 'no-fit') return true;
        const chosen = fleet.find((h) => h.id === result.hostId);
        assert.ok(chosen !== undefined && chosen.state === 'ONLINE');
        assert.equal(new Set(result.gpuUuids).size, req.gpuCount);
        for (const uuid of result.gpuUuids) {
          const card = chosen.gpus.find((g) => g.uuid === uuid);
          assert.ok(card !== undefined);
          assert.ok(matchesGpuModel(card.model, req.gpuModel));
          const after = card.reservedBytes + result.reservedBytesPerGpu;
          const ratio = card.overcommitRatio ?? options.defaultOvercommitRatio ?? 1;
          assert.ok(
            after <= card.totalBytes - (card.unownedBytes ?? 0),
            `${uuid}: more reserved than it physically offers`,
          );
          assert.ok(
            after + (card.suspendedBytes ?? 0) <= Math.floor(card.totalBytes * ratio),
            `${uuid}: caps past its oversubscription ratio`,
          );
        }
        assert.equal(result.bytesPerGpu, req.bytesPerGpu);
        return true;
      }),
      { numRuns: 500 },
    );
  });

  test('the same input gives the same answer, whatever the order of hosts and GPUs', () => {
    fc.assert(
      fc.property(fleetArb, requestArb, optionsArb, fc.integer(), (fleet, req, options, seed) => {
        const reordered = shuffled(fleet, seed).map((h) => ({
          ...h,
          gpus: shuffled(h.gpus, seed + 1),
        }));
        const first = place(req, fleet, options);
        assert.deepEqual(place(req, fleet, options), first);
        assert.deepEqual(place(req, reordered, options), first);
      }),
      { numRuns: 500 },
    );
  });

  test('places whenever some host can take the shard, with the best score the policy allows', () => {
    fc.assert(
      fc.property(fleetArb, requestArb, optionsArb, (fleet, req, options) => {
        const scores = feasibleScores(req, fleet, options);
        const result = place(req, fleet, options);
        if (scores.length === 0) {
          assert.equal(result.kind, 'no-fit');
          const reasons = (result as NoFit).reasons;
          assert.equal(reasons.length, fleet.length);
          assert.deepEqual(
            reasons.map((r) => r.hostId),
            fleet.map((h) => h.id).sort(),
          );
          return;
        }
        const won = placed(result);
        const h = fleet.find((x) => x.id === won.hostId)!;
        const ratio = options.defaultOvercommitRatio ?? 1;
        const score = won.gpuUuids
          .map((uuid) => h.gpus.find((g) => g.uuid === uuid)!)
          .reduce((sum, g) => sum + modelRoom(g, ratio), 0);
        const values = scores.map((s) => s.score);
        const best = req.policy === 'spread' ? Math.max(...values) : Math.min(...values);
        assert.equal(score, best);
        const tied = scores
          .filter((s) => s.score === best)
          .map((s) => s.hostId)
          .sort();
        assert.equal(won.hostId, tied[0]);
      }),
      { numRuns: 500 },
    );
  });
});
