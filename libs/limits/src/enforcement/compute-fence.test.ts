import assert from 'node:assert/strict';
import { describe, test } from 'node:test';

import fc from 'fast-check';

import {
  ungovernedCompute,
  ungovernedComputeMessage,
  type ComputeFenceDecision,
  type ComputeFenceShard,
  type ComputeWindow,
  type LaunchStamp,
  type ProcessUtilization,
} from './compute-fence.js';
import { CAP_POLICIES, type CapPolicy } from './enforcement.js';

const GPU0 = 'GPU-00000000-0000-0000-0000-000000000000';
const GPU1 = 'GPU-11111111-1111-1111-1111-111111111111';
const GPUS = [GPU0, GPU1, 'GPU-22222222-2222-2222-2222-222222222222'];
const S = 1_000_000_000n;
const W1: ComputeWindow = { startNs: 100n * S, endNs: 105n * S };
const W2: ComputeWindow = { startNs: 105n * S, endNs: 110n * S };

const shard = (shardId: string, policy: CapPolicy = 'report'): ComputeFenceShard => ({
  shardId,
  policy,
});
const busy = (shardId: string, pid: number, ...sm: number[]): ProcessUtilization[] =>
  sm.map((smPercent) => ({ pid, gpuUuid: GPU0, smPercent, shardId }));

describe('ungovernedCompute', () => {
  test('busy with no ledger member in two consecutive windows: a finding with the numbers', () => {
    const shards = [shard('a', 'kill')];
    const first = ungovernedCompute(busy('a', 7, 60, 70, 80), [], shards, W1, undefined);
    assert.deepEqual(first.findings, [], 'one window alone is no finding');
    assert.deepEqual(first.suspects, [{ shardId: 'a', gpuUuid: GPU0 }]);
    const second = ungovernedCompute(
      [...busy('a', 7, 60, 80), ...busy('a', 8, 5, 5, 20)],
      [],
      shards,
      W2,
      first,
    );
    assert.deepEqual(second.findings, [
      {
        shardId: 'a',
        gpuUuid: GPU0,
        action: 'kill',
        busyPercent: 80,
        samples: 5,
        busySamples: 3,
        thresholdPercent: 10,
        windowSeconds: 5,
        processes: [
          { pid: 7, smPercent: 70, samples: 2 },
          { pid: 8, smPercent: 10, samples: 3 },
        ],
        pids: [7, 8],
        repeated: false,
        act: true,
      },
    ]);
  });

  test('a member that launched in the window is governed; one whose last launch is older is not', () => {
    const shards = [shard('a'), shard('b')];
    const samples = [...busy('a', 1, 90, 90), ...busy('b', 2, 90, 90)];
    // a launches through libvgpu.so in both windows; b's last launch came before the first.
    const ledger = (window: ComputeWindow): LaunchStamp[] => [
      { shardId: 'a', gpuUuid: GPU0, lastKernelNs: window.startNs + 1n },
      { shardId: 'b', gpuUuid: GPU0, lastKernelNs: W1.startNs - 1n },
    ];
    const first = ungovernedCompute(samples, ledger(W1), shards, W1, undefined);
    const second = ungovernedCompute(samples, ledger(W2), shards, W2, first);
    assert.deepEqual(
      second.findings.map((f) => [f.shardId, f.lastKernelNs]),
      [['b', W1.startNs - 1n]],
    );
  });

  test('report and stop act once per episode; kill again only on a process not yet killed', () => {
    const shards = [shard('r', 'report'), shard('s', 'stop'), shard('k', 'kill')];
    const samples = [...busy('r', 1, 50, 50), ...busy('s', 2, 50, 50), ...busy('k', 3, 50, 50)];
    let decision = ungovernedCompute(samples, [], shards, W1, undefined);
    decision = ungovernedCompute(samples, [], shards, W2, decision);
    assert.deepEqual(
      decision.findings.map((f) => [f.shardId, f.act, f.pids]),
      [
        ['k', true, [3]],
        ['r', true, []],
        ['s', true, []],
      ],
    );
    const W3 = { startNs: W2.endNs, endNs: W2.endNs + 5n * S };
    const again = ungovernedCompute(
      [...samples, ...busy('k', 4, 30, 30)],
      [],
      shards,
      W3,
      decision,
      { dying: new Set([3]) },
    );
    assert.deepEqual(
      again.findings.map((f) => [f.shardId, f.repeated, f.act, f.pids]),
      [
        ['k', true, true, [4]],
        ['r', true, false, []],
        ['s', true, false, []],
      ],
    );
  });

  test('one busy sample, processes of no shard and shards it is not told about are never suspects', () => {
    const samples: ProcessUtilization[] = [
      ...busy('a', 1, 100, 0, 0),
      { pid: 2, gpuUuid: GPU0, smPercent: 100 },
      { pid: 2, gpuUuid: GPU0, smPercent: 100 },
      ...busy('gone', 3, 100, 100),
    ];
    const decision = ungovernedCompute(samples, [], [shard('a')], W1, undefined);
    assert.deepEqual(decision.suspects, []);
  });

  test('refuses a threshold, a sample count or a window that cannot be', () => {
    assert.throws(() => ungovernedCompute([], [], [], W1, undefined, { thresholdPercent: 0 }));
    assert.throws(() => ungovernedCompute([], [], [], W1, undefined, { thresholdPercent: 101 }));
    assert.throws(() => ungovernedCompute([], [], [], W1, undefined, { minSamples: 0 }));
    assert.throws(() => ungovernedCompute([], [], [], W1, undefined, { minSamples: 1.5 }));
    assert.throws(
      () => ungovernedCompute([], [], [], { startNs: 5n, endNs: 5n }, undefined),
      /window/,
    );
  });

  test('the sentence people read', () => {
    assert.equal(
      ungovernedComputeMessage(4242, 67.6, 5.02),
      'ungoverned GPU work: pid 4242 ran kernels outside the compute ledger (smUtil 68 % over 5 s)',
    );
  });
});

// ---------------------------------------------------------------------------------------
// Properties over random windows.

const shardIds = ['s0', 's1', 's2', 's3'];
/** Where a member's last launch lies relative to a window (absent: no member at all). */
const LAUNCH = ['none', 'never', 'before', 'start', 'inside', 'after'] as const;
type Launch = (typeof LAUNCH)[number];

function launchNs(launch: Launch, window: ComputeWindow): bigint | undefined {
  switch (launch) {
    case 'none':
      return undefined;
    case 'never':
      return 0n;
    case 'before':
      return window.startNs - 1n;
    case 'start':
      return window.startNs;
    case 'inside':
      return (window.startNs + window.endNs) / 2n;
    case 'after':
      return window.endNs + 1n; // read a moment after the window closed
  }
}

const arbitraryWindow = fc.record({
  samples: fc.array(
    fc.record({
      pid: fc.integer({ min: 1, max: 30 }),
      gpu: fc.integer({ min: 0, max: 2 }),
      sm: fc.integer({ min: 0, max: 100 }),
      shard: fc.integer({ min: -1, max: 3 }),
    }),
    { maxLength: 40 },
  ),
  launches: fc.array(fc.array(fc.constantFrom(...LAUNCH), { minLength: 3, maxLength: 3 }), {
    minLength: 4,
    maxLength: 4,
  }),
});
const arbitraryHost = fc.record({
  policies: fc.array(fc.constantFrom(...CAP_POLICIES), { minLength: 4, maxLength: 4 }),
  windows: fc.array(arbitraryWindow, { minLength: 1, maxLength: 4 }),
  threshold: fc.integer({ min: 1, max: 100 }),
  minSamples: fc.integer({ min: 1, max: 4 }),
});

type Host = typeof arbitraryHost extends fc.Arbitrary<infer T> ? T : never;

interface Round {
  readonly window: ComputeWindow;
  readonly samples: ProcessUtilization[];
  readonly ledger: LaunchStamp[];
}

function roundsOf(host: Host) {
  // A pid belongs to one shard (or none) in every window, as a process belongs to one cgroup.
  const owner = new Map<number, number>();
  return host.windows.map((w, i): Round => {
    const window = { startNs: BigInt(i) * 5n * S + S, endNs: BigInt(i + 1) * 5n * S + S };
    const samples = w.samples.map((s) => {
      if (!owner.has(s.pid)) owner.set(s.pid, s.shard);
      const shard = owner.get(s.pid)!;
      return {
        pid: s.pid,
        gpuUuid: GPUS[s.gpu]!,
        smPercent: s.sm,
        ...(shard >= 0 ? { shardId: shardIds[shard]! } : {}),
      };
    });
    const ledger = shardIds.flatMap((shardId, s) =>
      GPUS.flatMap((gpuUuid, g) => {
        const lastKernelNs = launchNs(w.launches[s]![g]!, window);
        return lastKernelNs === undefined ? [] : [{ shardId, gpuUuid, lastKernelNs }];
      }),
    );
    return { window, samples, ledger };
  });
}

function run(host: Host) {
  const shards = shardIds.map((shardId, i) => shard(shardId, host.policies[i]!));
  const options = { thresholdPercent: host.threshold, minSamples: host.minSamples };
  const rounds = roundsOf(host);
  const decisions: ComputeFenceDecision[] = [];
  for (const round of rounds) {
    decisions.push(
      ungovernedCompute(
        round.samples,
        round.ledger,
        shards,
        round.window,
        decisions.at(-1),
        options,
      ),
    );
  }
  return { rounds, decisions, shards, options };
}

/** Samples of the shard on the GPU at or above the threshold. */
const busyCount = (round: Round, shardId: string, gpuUuid: string, threshold: number) =>
  round.samples.filter(
    (s) => s.shardId === shardId && s.gpuUuid === gpuUuid && s.smPercent >= threshold,
  ).length;
const launchedIn = (round: Round, shardId: string, gpuUuid: string) => {
  const member = round.ledger.find((m) => m.shardId === shardId && m.gpuUuid === gpuUuid);
  return member !== undefined && member.lastKernelNs >= round.window.startNs;
};

describe('ungovernedCompute properties', () => {
  test('never flags a shard whose member launched in the window', () => {
    fc.assert(
      fc.property(arbitraryHost, (host) => {
        const { rounds, decisions } = run(host);
        decisions.forEach((decision, i) => {
          for (const s of decision.suspects)
            assert.ok(!launchedIn(rounds[i]!, s.shardId, s.gpuUuid));
        });
      }),
    );
  });

  test('always flags a shard busy past the threshold in two consecutive windows with no member', () => {
    // Besides what the random windows hold, a bypass is planted: a process of one shard, busy
    // past the threshold in enough samples of two consecutive windows, its member there gone.
    const planted = fc.record({
      host: arbitraryHost.filter((h) => h.windows.length >= 2),
      shard: fc.integer({ min: 0, max: 3 }),
      gpu: fc.integer({ min: 0, max: 2 }),
      at: fc.nat(),
      extra: fc.integer({ min: 0, max: 100 }),
    });
    fc.assert(
      fc.property(planted, ({ host, shard: s, gpu, at, extra }) => {
        const from = at % (host.windows.length - 1);
        const sm = host.threshold + (extra % (101 - host.threshold));
        const windows = host.windows.map((w, i) => {
          if (i !== from && i !== from + 1) return w;
          const launches = w.launches.map((row, r) =>
            row.map((launch, g) => (r === s && g === gpu ? ('none' as const) : launch)),
          );
          const samples = [
            ...w.samples,
            ...Array.from({ length: host.minSamples }, () => ({ pid: 99, gpu, sm, shard: s })),
          ];
          return { samples, launches };
        });
        const { rounds, decisions, options } = run({ ...host, windows });
        const found = decisions[from + 1]!.findings.find(
          (f) => f.shardId === shardIds[s] && f.gpuUuid === GPUS[gpu],
        );
        assert.ok(found, 'the planted bypass is found');
        assert.equal(found.action, host.policies[s]);
        assert.equal(found.lastKernelNs, undefined);
        assert.ok(found.processes.some((p) => p.pid === 99));
        // And every other shard busy in both windows with no member is found as well.
        for (let i = 1; i < rounds.length; i++) {
          for (const shardId of shardIds) {
            for (const gpuUuid of GPUS) {
              const busyBoth = [rounds[i - 1]!, rounds[i]!].every(
                (round) =>
                  busyCount(round, shardId, gpuUuid, options.thresholdPercent) >=
                    options.minSamples &&
                  !round.ledger.some((m) => m.shardId === shardId && m.gpuUuid === gpuUuid),
              );
              if (!busyBoth) continue;
              const other = decisions[i]!.findings.find(
                (f) => f.shardId === shardId && f.gpuUuid === gpuUuid,
              );
              assert.ok(other, `${shardId} on ${gpuUuid} in window ${i}`);
              assert.equal(other.action, host.policies[shardIds.indexOf(shardId)]);
            }
          }
        }
      }),
    );
  });

  test('no finding from a single window', () => {
    fc.assert(
      fc.property(arbitraryHost, (host) => {
        const { decisions } = run(host);
        assert.deepEqual(decisions[0]!.findings, []);
        for (let i = 1; i < decisions.length; i++) {
          for (const f of decisions[i]!.findings) {
            assert.ok(
              decisions[i - 1]!.suspects.some(
                (s) => s.shardId === f.shardId && s.gpuUuid === f.gpuUuid,
              ),
              'a finding was a suspect of the window before',
            );
          }
        }
      }),
    );
  });

  test('thresholds are respected: enough busy samples, processes past the threshold, kills only of them', () => {
    fc.assert(
      fc.property(arbitraryHost, (host) => {
        const { rounds, decisions, options } = run(host);
        decisions.forEach((decision, i) => {
          const round = rounds[i]!;
          for (const s of decision.suspects) {
            assert.ok(
              busyCount(round, s.shardId, s.gpuUuid, options.thresholdPercent) >=
                options.minSamples,
            );
          }
          for (const f of decision.findings) {
            assert.equal(f.thresholdPercent, options.thresholdPercent);
            assert.ok(f.busySamples >= options.minSamples);
            assert.ok(f.busyPercent >= 0 && f.busyPercent <= 100);
            for (const p of f.processes) {
              assert.ok(
                round.samples.some(
                  (s) =>
                    s.pid === p.pid &&
                    s.shardId === f.shardId &&
                    s.gpuUuid === f.gpuUuid &&
                    s.smPercent >= options.thresholdPercent,
                ),
                `pid ${p.pid} had a sample past the threshold`,
              );
            }
            if (f.action !== 'kill') assert.deepEqual(f.pids, []);
            else
              assert.deepEqual(
                f.pids,
                f.processes.map((p) => p.pid),
              );
          }
        });
        // A higher threshold never finds more.
        if (host.threshold < 100) {
          const stricter = run({ ...host, threshold: host.threshold + 1 });
          decisions.forEach((decision, i) => {
            const keys = new Set(decision.suspects.map((s) => `${s.shardId}|${s.gpuUuid}`));
            for (const s of stricter.decisions[i]!.suspects)
              assert.ok(keys.has(`${s.shardId}|${s.gpuUuid}`));
          });
        }
      }),
    );
  });

  test('shards with no samples are never flagged', () => {
    fc.assert(
      fc.property(arbitraryHost, (host) => {
        const { rounds, decisions } = run(host);
        decisions.forEach((decision, i) => {
          for (const s of decision.suspects) {
            assert.ok(
              rounds[i]!.samples.some((x) => x.shardId === s.shardId && x.gpuUuid === s.gpuUuid),
            );
          }
        });
      }),
    );
  });
});

describe('ungovernedCompute process by process', () => {
  const ownLaunch = ['unknown', 'no slot', 'before', 'in'] as const;
  type OwnLaunch = (typeof ownLaunch)[number];
  /** Each pid's own last launch in a window, as the agent reads it from the pid's slot. */
  const launchesOf = (window: ComputeWindow, picks: readonly OwnLaunch[]) => {
    const map = new Map<number, bigint | null>();
    picks.forEach((pick, pid) => {
      if (pick === 'no slot') map.set(pid, null);
      else if (pick === 'before') map.set(pid, window.startNs - 1n);
      else if (pick === 'in') map.set(pid, window.startNs);
    });
    return map;
  };
  const decide = (host: Host, picks: (window: ComputeWindow) => Map<number, bigint | null>) => {
    const shards = shardIds.map((shardId, i) => shard(shardId, host.policies[i]!));
    const rounds = roundsOf(host);
    const decisions: ComputeFenceDecision[] = [];
    const maps = rounds.map((round) => picks(round.window));
    rounds.forEach((round, i) =>
      decisions.push(
        ungovernedCompute(round.samples, round.ledger, shards, round.window, decisions.at(-1), {
          thresholdPercent: host.threshold,
          minSamples: host.minSamples,
          processLaunches: maps[i]!,
        }),
      ),
    );
    return { rounds, decisions, maps };
  };

  test('a shard that launched: only its busy processes with no launch of their own are named', () => {
    const shards = [shard('a', 'kill')];
    const stamps: LaunchStamp[] = [{ shardId: 'a', gpuUuid: GPU0, lastKernelNs: 106n * S }];
    const samples = [...busy('a', 7, 90, 90, 90), ...busy('a', 8, 40, 50)];
    const own = (w: ComputeWindow) =>
      new Map<number, bigint | null>([
        [7, w.startNs + S],
        [8, null],
      ]);
    const first = ungovernedCompute(
      samples,
      [{ ...stamps[0]!, lastKernelNs: 101n * S }],
      shards,
      W1,
      undefined,
      {
        processLaunches: own(W1),
      },
    );
    const second = ungovernedCompute(samples, stamps, shards, W2, first, {
      processLaunches: own(W2),
    });
    assert.deepEqual(first.suspects, [{ shardId: 'a', gpuUuid: GPU0 }]);
    assert.equal(second.findings.length, 1);
    const [finding] = second.findings;
    assert.deepEqual(finding!.processes, [{ pid: 8, smPercent: 45, samples: 2 }]);
    assert.deepEqual(finding!.pids, [8], 'the sibling that launches through libvgpu.so lives');
    assert.equal(finding!.lastKernelNs, 106n * S, "the shard's own last launch");
    // The same process launching through libvgpu.so itself: nothing.
    const governed = (w: ComputeWindow) =>
      new Map<number, bigint | null>([
        [7, w.startNs],
        [8, w.startNs],
      ]);
    const quiet = ungovernedCompute(samples, stamps, shards, W2, first, {
      processLaunches: governed(W2),
    });
    assert.deepEqual(quiet, { suspects: [], findings: [] });
  });

  test('property: where the shard launched, a named process never launched on its own in the window', () => {
    fc.assert(
      fc.property(
        arbitraryHost,
        fc.array(fc.constantFrom(...ownLaunch), { minLength: 31, maxLength: 31 }),
        (host, picks) => {
          const { rounds, decisions, maps } = decide(host, (w) => launchesOf(w, picks));
          decisions.forEach((decision, i) => {
            for (const f of decision.findings) {
              if (!launchedIn(rounds[i]!, f.shardId, f.gpuUuid)) continue;
              for (const p of f.processes) {
                const own = maps[i]!.get(p.pid);
                assert.ok(
                  own === null || (own !== undefined && own < rounds[i]!.window.startNs),
                  `pid ${p.pid} named though its slot says ${String(own)}`,
                );
              }
            }
          });
        },
      ),
    );
  });

  test('property: with no process known, the decisions are those judged by shard alone', () => {
    fc.assert(
      fc.property(arbitraryHost, (host) => {
        assert.deepEqual(decide(host, () => new Map()).decisions, run(host).decisions);
      }),
    );
  });
});
