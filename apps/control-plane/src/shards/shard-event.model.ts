/**
 * The shardEvents subscription's payload: a shard's state change, or a notice about it (cap
 * violation, ungoverned compute, idle), and the kind that tells them apart. Separate from the
 * shard's own type because it is what the event stream carries, with the fence and compute
 * notices a plain shard query never returns.
 */
import { ArgsType, Field, ID, ObjectType, registerEnumType } from '@nestjs/graphql';
import { IdleNotice } from '../compute/idle.model.js';
import type { ShardStateChange } from '../events/shard-event-bus.js';
import { kindOf } from '../events/shard-event-payloads.js';
import { CapViolation } from '../fence/cap-policy.model.js';
import { UngovernedCompute } from '../fence/ungoverned-compute.model.js';
import { Connection, ConnectionArgs } from '../graphql/connection.js';
import { ShardState } from './shard-enums.js';
import type { ShardRecord } from './shard-record.js';
import { Shard, shardView } from './shard.model.js';

@ObjectType({ description: 'A state change of a shard.' })
export class ShardEvent {
  @Field(() => ID, {
    nullable: true,
    description:
      'The stored event (shardEventHistory, teamShardEvents): the same id live and in the history, so a client can merge the two. Null only for an event that could not be stored.',
  })
  id!: string | null;

  @Field(() => Shard, {
    description:
      'The shard after the change (live); as it is now (from the history: shardEventHistory, teamShardEvents).',
  })
  shard!: Shard;

  @Field(() => ShardState, { nullable: true, description: 'Null for a shard just created.' })
  previousState!: ShardState | null;

  @Field(() => ShardState)
  state!: ShardState;

  @Field()
  at!: Date;

  @Field(() => ShardEventKind, {
    description:
      "STATE: the shard changed state. VIOLATION: see `violation`. UNGOVERNED_COMPUTE: it ran GPU work outside the compute ledger; see `ungovernedCompute`. IDLE: its team's idle policy found it idle (the warning); IDLE_STOP: the policy stops it (a STATE event to STOPPING follows); IDLE_SUSPEND: the policy suspends it to host RAM (a STATE event to SUSPENDING follows); see `idle`.",
  })
  kind!: ShardEventKind;

  @Field(() => CapViolation, {
    nullable: true,
    description:
      "Set for kind VIOLATION: the shard's real GPU memory passed its cap plus the host's tolerance and its cap policy was applied (state and previousState are then its current state).",
  })
  violation!: CapViolation | null;

  @Field(() => UngovernedCompute, {
    nullable: true,
    description:
      'Set for kind UNGOVERNED_COMPUTE: the compute fence found kernels no compute-ledger turn governed (a process that bypassed libvgpu.so) and its cap policy was applied (state and previousState are then its current state).',
  })
  ungovernedCompute!: UngovernedCompute | null;

  @Field(() => IdleNotice, {
    nullable: true,
    description: 'Set for kinds IDLE, IDLE_STOP and IDLE_SUSPEND.',
  })
  idle!: IdleNotice | null;
}

export enum ShardEventKind {
  STATE = 'STATE',
  VIOLATION = 'VIOLATION',
  UNGOVERNED_COMPUTE = 'UNGOVERNED_COMPUTE',
  IDLE = 'IDLE',
  IDLE_STOP = 'IDLE_STOP',
  IDLE_SUSPEND = 'IDLE_SUSPEND',
}

registerEnumType(ShardEventKind, { name: 'ShardEventKind' });

@ObjectType()
export class ShardEventConnection extends Connection(ShardEvent) {}

@ArgsType()
export class ShardEventHistoryArgs extends ConnectionArgs {
  @Field(() => [ShardEventKind], {
    nullable: true,
    description: 'Only events of these kinds (default: every kind).',
  })
  kinds?: ShardEventKind[] | null;
}

/** What a subscriber or a page of history is given for one change. */
export function shardEventView(change: ShardStateChange, shard: ShardRecord): ShardEvent {
  return {
    id: change.eventId ?? null,
    shard: shardView(shard),
    previousState: change.previousState as ShardState | null,
    state: change.state as ShardState,
    at: change.at,
    kind: kindOf(change) as ShardEventKind,
    violation: change.violation ?? null,
    ungovernedCompute: change.ungovernedCompute ?? null,
    idle: change.idle ?? null,
  };
}
