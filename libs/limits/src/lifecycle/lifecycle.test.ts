import assert from 'node:assert/strict';
import { describe, test } from 'node:test';
import fc from 'fast-check';
import {
  countsAgainstQuota,
  FINAL_STATES,
  holdsHostMemory,
  holdsReservation,
  isFinal,
  SHARD_STATES,
  shouldRun,
  type ShardState,
} from './states.js';
import {
  ACQUIRING_CAUSES,
  allTransitions,
  canTransition,
  checkTransition,
  startableStates,
  startDecision,
  INITIAL_STATES,
  reservationChange,
  SUSPEND_CAUSES,
  TRANSITIONS,
} from './transitions.js';
import {
  AGENT_REPORTS,
  HOST_LOSS_STATES,
  nextOnHostLoss,
  nextOnReport,
  stoppedStateOf,
  type StopIntent,
} from './next-state.js';
import {
  CONTAINER_KINDS,
  containerActionFor,
  converge,
  desiredContainerOf,
  desiredMemoryOf,
  memoryActionFor,
  OBSERVED_MEMORY,
  type ContainerObservation,
  type MemoryAction,
  type ObservedMemory,
} from './convergence.js';
import {
  DEFAULT_STUCK_SECONDS,
  isTransitionalState,
  parseStuckSeconds,
  stuckShards,
} from './stuck.js';

const state = fc.constantFrom(...SHARD_STATES);
const intent = fc.constantFrom<StopIntent>('stop', 'requeue', 'preempt');
const memory = fc.constantFrom<ObservedMemory | undefined>(...OBSERVED_MEMORY, undefined);
const observation: fc.Arbitrary<ContainerObservation> = fc.oneof(
  fc.constantFrom<ContainerObservation>(
    ...CONTAINER_KINDS.filter((k) => k !== 'exited' && k !== 'running' && k !== 'paused').map(
      (kind) => ({ kind }) as ContainerObservation,
    ),
  ),
  fc
    .tuple(fc.constantFrom('running' as const, 'paused' as const), memory)
    .map(([kind, where]) => (where === undefined ? { kind } : { kind, memory: where })),
  fc.integer({ min: 0, max: 255 }).map((exitCode) => ({ kind: 'exited' as const, exitCode })),
);

describe('shard lifecycle', () => {
  test('no transition leaves a final state except deletion and a restart, and none leaves DELETED', () => {
    const restart = (from: ShardState, to: ShardState) =>
      from !== 'DELETED' && to === 'PENDING' && canTransition(from, to, 'start-requested');
    for (const from of FINAL_STATES) {
      for (const to of SHARD_STATES) {
        if (canTransition(from, to) && !restart(from, to))
          assert.equal(to, 'DELETED', `${from} → ${to}`);
      }
    }
    assert.deepEqual(TRANSITIONS.DELETED, {});
    fc.assert(
      fc.property(state, state, (from, to) => {
        if (isFinal(from) && to !== 'DELETED' && !restart(from, to))
          assert.equal(canTransition(from, to), false);
      }),
    );
  });

  test('startShard runs a shard whose run ended again only through the queue, taking nothing at once', () => {
    assert.deepEqual(startableStates(), ['STOPPED', 'EXITED', 'FAILED', 'PREEMPTED', 'EXPIRED']);
    const starts = allTransitions().filter((t) => t.cause === 'start-requested');
    assert.deepEqual(
      starts,
      startableStates().map((from) => ({ from, to: 'PENDING', cause: 'start-requested' })),
      'start-requested leads only to PENDING',
    );
    for (const from of startableStates()) {
      assert.ok(isFinal(from) && from !== 'DELETED', from);
      const check = checkTransition(from, 'PENDING', 'start-requested');
      assert.ok(check.ok && check.reservation === 'keep' && !check.endsRun, from);
      assert.ok(!countsAgainstQuota(from), `${from}: back in the quota only by the start`);
    }
    // Back in the quota (PENDING counts), never straight onto GPUs.
    assert.ok(countsAgainstQuota('PENDING') && !holdsReservation('PENDING'));
  });

  test('startDecision: starts what the table lets start, leaves waiting or running shards, refuses the rest', () => {
    fc.assert(
      fc.property(state, (from) => {
        const decision = startDecision(from);
        assert.equal(
          decision.kind === 'start',
          canTransition(from, 'PENDING', 'start-requested'),
          from,
        );
        if (decision.kind === 'unchanged') assert.ok(countsAgainstQuota(from) && !isFinal(from));
        if (decision.kind === 'refused') {
          assert.match(decision.message, new RegExp(`a ${from} shard cannot be started`));
          assert.ok(!['PENDING', 'PLACED', 'STARTING', 'RUNNING'].includes(from));
        }
      }),
    );
    assert.equal(startDecision('DELETED').kind, 'refused');
    assert.equal(startDecision('RUNNING').kind, 'unchanged');
    assert.equal(startDecision('EXITED').kind, 'start');
    assert.match((startDecision('SUSPENDED') as { message: string }).message, /resumeShard/);
  });

  test('every state but DELETED can be deleted; every state is reachable from a new shard', () => {
    for (const from of SHARD_STATES) {
      if (from !== 'DELETED') assert.ok(canTransition(from, 'DELETED', 'deleted'), from);
    }
    const reached = new Set<ShardState>(Object.keys(INITIAL_STATES) as ShardState[]);
    for (let grew = true; grew;) {
      grew = false;
      for (const { from, to } of allTransitions()) {
        if (reached.has(from) && !reached.has(to)) {
          reached.add(to);
          grew = true;
        }
      }
    }
    assert.deepEqual([...reached].sort(), [...SHARD_STATES].sort());
  });

  test('reservations are taken only by placement or recovery, and released on leaving the holding states', () => {
    for (const { from, to, cause } of allTransitions()) {
      const change = reservationChange(from, to);
      if (change === 'acquire')
        assert.ok(ACQUIRING_CAUSES.has(cause), `${from} → ${to} by ${cause}`);
      const check = checkTransition(from, to, cause);
      assert.ok(check.ok);
      assert.equal(check.reservation, change);
    }
    for (const initial of Object.keys(INITIAL_STATES) as ShardState[]) {
      assert.equal(holdsReservation(initial), initial === 'PLACED');
    }
  });

  test('quota usage and reserved bytes, kept incrementally over any run of transitions, equal the sums over the holding states', () => {
    const transitions = allTransitions();
    fc.assert(
      fc.property(
        fc.array(fc.record({ size: fc.integer({ min: 1, max: 1 << 20 }), pending: fc.boolean() }), {
          minLength: 1,
          maxLength: 8,
        }),
        fc.array(fc.tuple(fc.nat(), fc.nat()), { maxLength: 60 }),
        (created, steps) => {
          const shards = created.map((s) => ({
            size: s.size,
            state: (s.pending ? 'PENDING' : 'PLACED') as ShardState,
          }));
          let reserved = shards.reduce(
            (sum, s) => sum + (holdsReservation(s.state) ? s.size : 0),
            0,
          );
          let quota = shards.reduce((sum, s) => sum + s.size, 0);
          for (const [which, pick] of steps) {
            const shard = shards[which % shards.length]!;
            const options = transitions.filter((t) => t.from === shard.state);
            if (options.length === 0) continue;
            const { to, cause } = options[pick % options.length]!;
            const check = checkTransition(shard.state, to, cause);
            assert.ok(check.ok);
            if (check.reservation === 'acquire') reserved += shard.size;
            if (check.reservation === 'release') reserved -= shard.size;
            quota +=
              (countsAgainstQuota(to) ? shard.size : 0) -
              (countsAgainstQuota(shard.state) ? shard.size : 0);
            shard.state = to;
            assert.equal(
              reserved,
              shards.reduce((sum, s) => sum + (holdsReservation(s.state) ? s.size : 0), 0),
            );
            assert.equal(
              quota,
              shards.reduce((sum, s) => sum + (countsAgainstQuota(s.state) ? s.size : 0), 0),
            );
          }
        },
      ),
    );
  });

  test('every holding state counts against quota; no final state holds anything', () => {
    for (const s of SHARD_STATES) {
      if (holdsReservation(s)) assert.ok(countsAgainstQuota(s), s);
      if (isFinal(s)) assert.ok(!holdsReservation(s) && !countsAgainstQuota(s) && !shouldRun(s), s);
    }
  });

  test('a lost host: every shard holding something there ends holding nothing there (LOST, a stopping one as its stop intent says); the others untouched', () => {
    const intents: StopIntent[] = ['stop', 'requeue', 'preempt'];
    for (const from of SHARD_STATES) {
      const holdsOnHost = holdsReservation(from) || holdsHostMemory(from);
      assert.equal((HOST_LOSS_STATES as readonly ShardState[]).includes(from), holdsOnHost, from);
      for (const intent of intents) {
        const next = nextOnHostLoss(from, intent);
        assert.equal(next !== undefined, holdsOnHost, `${from} (${intent})`);
        if (next === undefined) continue;
        const check = checkTransition(from, next.state, next.cause);
        assert.ok(check.ok, `${from} → ${next.state} by ${next.cause}`);
        assert.equal(check.reservation, holdsReservation(from) ? 'release' : 'keep', from);
        assert.equal(holdsReservation(next.state), false, `${from} → ${next.state}`);
        assert.equal(holdsHostMemory(next.state), false, `${from} → ${next.state}`);
        if (from !== 'STOPPING') {
          assert.deepEqual(next, { state: 'LOST', cause: 'host-offline' }, from);
        } else if (intent === 'stop') {
          assert.deepEqual(next, { state: 'STOPPED', cause: 'host-offline' });
        } else {
          assert.deepEqual(next, stoppedStateOf(intent), intent);
        }
      }
    }
    assert.deepEqual(
      HOST_LOSS_STATES,
      SHARD_STATES.filter((s) => (HOST_LOSS_STATES as readonly ShardState[]).includes(s)),
      'in lifecycle order',
    );
    // An elastic shard lost comes back by where its host's agent finds its memory.
    for (const from of ['SUSPENDING', 'SUSPENDED', 'RESUMING'] as const) {
      const lost = nextOnHostLoss(from)!.state;
      assert.deepEqual(converge(lost, { kind: 'running', memory: 'resident' }).next, {
        state: 'RUNNING',
        cause: 'recovered',
      });
      assert.deepEqual(converge(lost, { kind: 'running', memory: 'suspended' }).next, {
        state: 'SUSPENDED',
        cause: 'recovered',
      });
      // Half moved: the agent finishes the suspend, its reservation held until then.
      assert.deepEqual(converge(lost, { kind: 'running', memory: 'partial' }).next, {
        state: 'SUSPENDING',
        cause: 'recovered',
      });
    }
  });

  test("an agent's report leads only to an allowed transition", () => {
    fc.assert(
      fc.property(state, fc.constantFrom(...AGENT_REPORTS), intent, (from, report, why) => {
        const next = nextOnReport(from, report, why);
        if (next === undefined || next.state === from) return;
        assert.ok(
          canTransition(from, next.state, next.cause),
          `${from} + ${report} → ${next.state} by ${next.cause}`,
        );
      }),
    );
    assert.deepEqual(nextOnReport('STARTING', 'RUNNING'), { state: 'RUNNING', cause: 'started' });
    // Its host's return brings a LOST shard back (lostShardReturn), never a report alone.
    for (const report of ['RUNNING', 'RESUMED', 'SUSPENDED'] as const) {
      assert.equal(nextOnReport('LOST', report), undefined, report);
    }
    assert.deepEqual(nextOnReport('LOST', 'EXITED'), { state: 'EXITED', cause: 'exited' });
    assert.deepEqual(nextOnReport('STOPPING', 'EXITED', 'requeue'), {
      state: 'PENDING',
      cause: 'requeued',
    });
    assert.equal(nextOnReport('STOPPING', 'RUNNING'), undefined);
    const to = (from: ShardState, report: (typeof AGENT_REPORTS)[number]) =>
      nextOnReport(from, report)?.state;
    assert.equal(to('PLACED', 'PULLING'), 'STARTING');
    assert.equal(to('RUNNING', 'EXITED'), 'EXITED');
    assert.equal(to('RUNNING', 'VANISHED'), 'FAILED');
    for (const reported of ['EXITED', 'FAILED', 'STOPPED', 'VANISHED'] as const) {
      assert.equal(to('STOPPING', reported), 'STOPPED', reported);
    }
    assert.equal(to('RUNNING', 'STARTING'), undefined);
    for (const finished of FINAL_STATES) assert.equal(to(finished, 'RUNNING'), undefined, finished);
    assert.equal(to('PENDING', 'RUNNING'), undefined);
  });
});

// ---------------------------------------------------------------------------------------
// Convergence: a model of one shard, its reservation and its one container slot.

interface World {
  state: ShardState;
  container: ContainerObservation;
  reserved: boolean;
}

/** Applies one reconciliation round; `room` says whether a recovery finds its GPUs free. */
function reconcileOnce(world: World, why: StopIntent, room: boolean): boolean {
  const decision = converge(world.state, world.container, why);
  let changed = false;
  if (decision.next !== undefined && decision.next.state !== world.state) {
    let { state: to, cause } = decision.next;
    if (cause === 'recovered' && to === 'RUNNING' && !room) {
      to = 'FAILED';
      cause = 'failed';
    }
    const check = checkTransition(world.state, to, cause);
    assert.ok(check.ok, `${world.state} → ${to} by ${cause}: ${check.ok ? '' : check.message}`);
    if (check.reservation === 'acquire') world.reserved = true;
    if (check.reservation === 'release') world.reserved = false;
    world.state = to;
    changed = true;
    // The agent acts on the reply, which reflects the new state.
    const action = containerActionFor(desiredContainerOf(to), world.container.kind);
    changed = act(world, action) || changed;
    return moveMemory(world, to) || changed;
  }
  changed = act(world, decision.container) || changed;
  return moveMemory(world, world.state) || changed;
}

/** The agent moves a running container's memory where the state wants it (after acting on it). */
function moveMemory(world: World, state: ShardState): boolean {
  const container = world.container;
  if (container.kind !== 'running' && container.kind !== 'paused') return false;
  const desired = desiredMemoryOf(state);
  if (desired === undefined) return false;
  const action: MemoryAction = memoryActionFor(desired, container.memory ?? 'resident');
  switch (action) {
    case 'none':
      return false;
    case 'suspend':
      world.container = { kind: container.kind, memory: 'suspended' };
      return true;
    case 'resume':
      assert.ok(world.reserved, `${state}: memory moved back to a GPU without a reservation`);
      world.container = { kind: container.kind, memory: 'resident' };
      return true;
  }
}

function act(world: World, action: ReturnType<typeof containerActionFor>): boolean {
  switch (action) {
    case 'none':
      return false;
    case 'launch':
      assert.equal(world.container.kind, 'absent', 'a launch never makes a second container');
      assert.ok(world.reserved, `${world.state}: a launch without a reservation`);
      world.container = { kind: 'running' };
      return true;
    case 'relaunch':
      assert.equal(world.container.kind, 'created', 'only a container that never ran is replaced');
      assert.ok(world.reserved, `${world.state}: a launch without a reservation`);
      world.container = { kind: 'running' };
      return true;
    case 'unpause': {
      const paused = world.container;
      world.container =
        paused.kind === 'paused' && paused.memory !== undefined
          ? { kind: 'running', memory: paused.memory }
          : { kind: 'running' };
      return true;
    }
    case 'stop':
      world.container = { kind: 'exited', exitCode: 137 };
      return true;
    case 'remove':
      world.container = { kind: 'absent' };
      return true;
  }
}

describe('convergence table', () => {
  test('every (state, container) pair has one defined action', () => {
    for (const s of SHARD_STATES) {
      for (const kind of CONTAINER_KINDS) {
        const observed = (
          kind === 'exited' ? { kind, exitCode: 1 } : { kind }
        ) as ContainerObservation;
        const decision = converge(s, observed);
        assert.ok(decision.container !== undefined, `${s} × ${kind}`);
        if (decision.next !== undefined && decision.next.state !== s) {
          assert.ok(canTransition(s, decision.next.state, decision.next.cause), `${s} × ${kind}`);
        }
      }
    }
  });

  test('a launch only where no container exists (at most one container per shard)', () => {
    for (const desired of ['run', 'suspended', 'stopped', 'none'] as const) {
      for (const kind of CONTAINER_KINDS) {
        const action = containerActionFor(desired, kind);
        if (action === 'launch') assert.equal(kind, 'absent');
        if (action === 'relaunch') assert.equal(kind, 'created');
      }
    }
  });

  test('repeated reconciliation from any pair settles where the container agrees with the state and nothing reserved runs nothing', () => {
    fc.assert(
      fc.property(
        state,
        observation,
        intent,
        fc.boolean(),
        fc.array(fc.boolean(), { minLength: 8, maxLength: 8 }),
        (start, container, why, room, docker) => {
          const world: World = { state: start, container, reserved: holdsReservation(start) };
          let stable = false;
          for (let round = 0; round < 8 && !stable; round++) {
            // Docker finishes what it was doing: a restart ends running or exited, a removal gone.
            if (world.container.kind === 'restarting') {
              world.container = docker[round]
                ? { kind: 'running' }
                : { kind: 'exited', exitCode: 1 };
            } else if (world.container.kind === 'removing') {
              world.container = { kind: 'absent' };
            }
            stable = !reconcileOnce(world, why, room);
          }
          assert.ok(stable, `not stable after 8 rounds from ${start} × ${container.kind}`);
          const desired = desiredContainerOf(world.state);
          const kind = world.container.kind;
          const where = kind === 'running' ? (world.container.memory ?? 'resident') : undefined;
          if (desired === 'run') {
            assert.equal(kind, 'running', `${world.state} with ${kind}`);
            assert.equal(where, 'resident', `${world.state} with its memory ${where}`);
          }
          if (desired === 'suspended') {
            assert.equal(kind, 'running', `${world.state} with ${kind}`);
            assert.equal(where, 'suspended', `${world.state} with its memory ${where}`);
          }
          // GPU memory is held only under a reservation.
          if (kind === 'running' && where !== 'suspended')
            assert.ok(world.reserved, `${world.state}: memory on the GPU without a reservation`);
          if (desired === 'stopped')
            assert.ok(
              !['running', 'paused', 'restarting', 'dead'].includes(kind),
              `${world.state} with ${kind}`,
            );
          if (desired === 'none') assert.equal(kind, 'absent', `${world.state} with ${kind}`);
          assert.equal(world.reserved, holdsReservation(world.state));
          if (world.reserved)
            assert.equal(kind, 'running', 'a reservation held by a shard that runs nothing');
          if (world.reserved)
            assert.equal(where, 'resident', 'a reservation held by a shard whose memory is away');
          // No final state moved anywhere: it stayed as it started.
          if (isFinal(start)) assert.equal(world.state, start);
        },
      ),
      { numRuns: 2000 },
    );
  });

  test('the crash between create and start: a PLACED or STARTING shard with a created container is launched afresh', () => {
    for (const s of ['PLACED', 'STARTING'] as const) {
      const decision = converge(s, { kind: 'created' });
      assert.equal(decision.next, undefined);
      assert.equal(decision.container, 'relaunch');
    }
    assert.deepEqual(converge('STOPPING', { kind: 'exited', exitCode: 0 }).next, {
      state: 'STOPPED',
      cause: 'stopped',
    });
    assert.deepEqual(converge('PLACED', { kind: 'running' }).next, {
      state: 'RUNNING',
      cause: 'started',
    });
  });
});

describe('elastic memory: suspend and resume', () => {
  const running = (where: ObservedMemory): ContainerObservation => ({
    kind: 'running',
    memory: where,
  });

  test('a suspended shard holds no reservation but host memory, and keeps its quota; the moves between hold both', () => {
    assert.equal(holdsReservation('SUSPENDED'), false);
    assert.equal(holdsHostMemory('SUSPENDED'), true);
    for (const moving of ['SUSPENDING', 'RESUMING'] as const) {
      assert.equal(holdsReservation(moving), true, moving);
      assert.equal(holdsHostMemory(moving), true, moving);
    }
    for (const s of ['SUSPENDING', 'SUSPENDED', 'RESUMING'] as const) {
      assert.equal(countsAgainstQuota(s), true, s);
    }
    assert.equal(reservationChange('SUSPENDING', 'SUSPENDED'), 'release');
    assert.equal(reservationChange('SUSPENDED', 'RESUMING'), 'acquire');
    assert.equal(reservationChange('SUSPENDED', 'STOPPED'), 'keep');
    assert.equal(reservationChange('RESUMING', 'SUSPENDED'), 'release');
  });

  test('every suspend cause starts from RUNNING only, and a suspended shard is never reclaimed', () => {
    for (const cause of SUSPEND_CAUSES) {
      for (const from of SHARD_STATES) {
        assert.equal(
          canTransition(from, 'SUSPENDING', cause),
          from === 'RUNNING',
          `${from} by ${cause}`,
        );
      }
    }
    for (const s of ['SUSPENDING', 'SUSPENDED', 'RESUMING'] as const) {
      assert.equal(canTransition(s, 'STOPPING', 'reclaim'), false, s);
    }
  });

  test('memory reports settle only the move they answer; late ones change nothing', () => {
    assert.deepEqual(nextOnReport('SUSPENDING', 'SUSPENDED'), {
      state: 'SUSPENDED',
      cause: 'suspended',
    });
    assert.deepEqual(nextOnReport('SUSPENDING', 'SUSPEND_FAILED'), {
      state: 'RUNNING',
      cause: 'suspend-failed',
    });
    assert.deepEqual(nextOnReport('RESUMING', 'RESUMED'), { state: 'RUNNING', cause: 'resumed' });
    assert.deepEqual(nextOnReport('RESUMING', 'RESUME_FAILED'), {
      state: 'SUSPENDED',
      cause: 'resume-failed',
    });
    // A late SUSPENDED of the previous suspend arrives while the shard resumes, a late RUNNING
    // (from its launch) while it suspends: neither moves it.
    assert.equal(nextOnReport('RESUMING', 'SUSPENDED'), undefined);
    assert.equal(nextOnReport('SUSPENDING', 'RUNNING'), undefined);
    assert.equal(nextOnReport('SUSPENDED', 'RUNNING'), undefined);
    assert.equal(nextOnReport('RUNNING', 'RESUMED'), undefined);
    assert.equal(nextOnReport('SUSPENDED', 'EXITED')?.state, 'EXITED');
    assert.equal(nextOnReport('STOPPING', 'SUSPENDED'), undefined);
  });

  test('crash points converge: a lost command, an agent killed mid-checkpoint, a lost event, a host back', () => {
    // The control plane committed SUSPENDING and died before sending the command: the next
    // reconcile has the agent suspend.
    assert.deepEqual(converge('SUSPENDING', running('resident')), {
      next: undefined,
      container: 'none',
      memory: 'suspend',
    });
    // The agent was killed mid-checkpoint (some processes locked or moved): finished either way.
    assert.equal(converge('SUSPENDING', running('partial')).memory, 'suspend');
    assert.equal(converge('RESUMING', running('partial')).memory, 'resume');
    assert.equal(converge('SUSPENDED', running('partial')).memory, 'suspend');
    // A suspend that failed half-way leaves a RUNNING shard partly moved: it is brought back.
    assert.equal(converge('RUNNING', running('partial')).memory, 'resume');
    // The event that ended the move was lost: the observation settles it.
    assert.deepEqual(converge('SUSPENDING', running('suspended')).next, {
      state: 'SUSPENDED',
      cause: 'suspended',
    });
    assert.deepEqual(converge('RESUMING', running('resident')).next, {
      state: 'RUNNING',
      cause: 'resumed',
    });
    // A host back from a loss: memory in host RAM comes back suspended, half-moved memory
    // suspending (the rest still on the GPU reserved until the agent finishes).
    assert.deepEqual(converge('LOST', running('suspended')).next, {
      state: 'SUSPENDED',
      cause: 'recovered',
    });
    assert.deepEqual(converge('LOST', running('partial')).next, {
      state: 'SUSPENDING',
      cause: 'recovered',
    });
    assert.deepEqual(converge('LOST', running('resident')).next, {
      state: 'RUNNING',
      cause: 'recovered',
    });
  });

  test('a suspended shard is never launched afresh: its memory lived in the container that is gone', () => {
    for (const s of ['SUSPENDING', 'SUSPENDED', 'RESUMING'] as const) {
      for (const kind of ['absent', 'created'] as const) {
        const decision = converge(s, { kind });
        assert.equal(decision.next?.state, 'FAILED', `${s} × ${kind}`);
        assert.notEqual(decision.container, 'launch');
        assert.notEqual(decision.container, 'relaunch');
      }
      assert.deepEqual(converge(s, { kind: 'exited', exitCode: 137 }).next, {
        state: 'EXITED',
        cause: 'exited',
      });
    }
    for (const kind of CONTAINER_KINDS) {
      const action = containerActionFor('suspended', kind);
      assert.ok(action !== 'launch' && action !== 'relaunch', kind);
    }
  });
});

describe('stuck shards', () => {
  test('exactly the transitional shards past their limit, with the action that fits their state', () => {
    fc.assert(
      fc.property(
        fc.array(fc.record({ id: fc.uuid(), state, age: fc.integer({ min: 0, max: 10_000 }) }), {
          maxLength: 30,
        }),
        fc.record({
          PENDING: fc.integer({ min: 0, max: 5000 }),
          PLACED: fc.integer({ min: 0, max: 5000 }),
          STARTING: fc.integer({ min: 0, max: 5000 }),
          SUSPENDING: fc.integer({ min: 0, max: 5000 }),
          RESUMING: fc.integer({ min: 0, max: 5000 }),
          STOPPING: fc.integer({ min: 0, max: 5000 }),
        }),
        (shards, limits) => {
          const now = 100_000_000;
          const stuck = stuckShards(
            shards.map((s) => ({ id: s.id, state: s.state, sinceMs: now - s.age * 1000 })),
            now,
            limits,
          );
          const expected = shards.filter(
            (s) => isTransitionalState(s.state) && limits[s.state] > 0 && s.age > limits[s.state],
          );
          assert.equal(stuck.length, expected.length);
          for (const s of stuck) {
            const actions = {
              PENDING: 'report',
              PLACED: 'resend-launch',
              STARTING: 'resend-launch',
              SUSPENDING: 'resend-suspend',
              RESUMING: 'resend-resume',
              STOPPING: 'resend-stop',
            } as const;
            assert.equal(s.action, actions[s.state]);
          }
          for (let i = 1; i < stuck.length; i++)
            assert.ok(stuck[i - 1]!.stuckForMs >= stuck[i]!.stuckForMs);
        },
      ),
    );
  });

  test('limits from the environment: named states change, others keep their default, bad input is refused', () => {
    const parsed = parseStuckSeconds('PLACED=30, STOPPING=0');
    assert.ok(parsed.ok);
    assert.deepEqual(parsed.limits, { ...DEFAULT_STUCK_SECONDS, PLACED: 30, STOPPING: 0 });
    for (const bad of ['RUNNING=5', 'PLACED', 'PLACED=-1', 'placed=5', 'PLACED=99999999']) {
      assert.equal(parseStuckSeconds(bad).ok, false, bad);
    }
  });
});
