import { Field, Float, ID, Int, ObjectType } from '@nestjs/graphql';
import { Size } from '../graphql/size.model.js';
import { Shard } from '../shards/shard.model.js';

@ObjectType({ description: 'A PENDING shard, where it stands in the queue and why it waits.' })
export class QueuedShard {
  @Field(() => Shard)
  shard!: Shard;

  @Field(() => Int, { description: '1-based, among all waiting shards, in queue order.' })
  position!: number;

  @Field({
    description:
      'capacity (fits nowhere now), behind (the room it fits is kept for a shard ahead), quota, guarantee (a non-preemptible class beyond its guarantee), reclaiming (borrowed shards are being stopped for it) or reclaimed (it was stopped to make room for a shard that still waits).',
  })
  reasonKind!: string;

  @Field({ description: 'For people.' })
  reason!: string;

  @Field(() => ID, {
    nullable: true,
    description:
      'The shard ahead whose room it would take; for reclaimed, the shard it was stopped for.',
  })
  waitingBehind!: string | null;

  @Field(() => ID, {
    nullable: true,
    description: 'The host whose room is kept for it (where it is expected to run), if any.',
  })
  expectedHostId!: string | null;

  @Field(() => Date, {
    nullable: true,
    description:
      'When it is expected to start: an estimate from what the queue knows, not a promise (shards carry no run-time estimates). reclaiming: when the grace of the last of its victims ends (now once past; null when they no longer free enough for it). capacity, behind: by the rate the queue placed shards lately, (shards ahead of it waiting on the fleet + 1) / placements per second from now; null until the queue placed at least 5 in 10 minutes. reclaimed: one placement after the shard it waits for, when that one has an estimate. quota, guarantee: null (it waits on its team, not on the fleet).',
  })
  estimatedStart!: Date | null;
}

@ObjectType({ description: "A team's guarantee, what it borrows above it, and its fair share." })
export class TeamShare {
  @Field(() => Size)
  guarantee!: Size;

  @Field(() => Size, {
    description: 'Requested bytes held above the guarantee: preemptible for teams within theirs.',
  })
  borrowed!: Size;

  @Field(() => Size, { description: 'Requested bytes of its shards that hold a reservation.' })
  held!: Size;

  @Field(() => Float, {
    description: 'Usage in GiB-hours, decayed with the configured half-life (default a week).',
  })
  decayedGiBHours!: number;

  @Field(() => Float, {
    nullable: true,
    description:
      'decayedGiBHours per guaranteed GiB: lower goes first among teams competing for idle capacity. Null without a guarantee (such a team goes after those with one once it used any).',
  })
  fairShare!: number | null;

  @Field(() => Int, { description: 'Its PENDING shards.' })
  pending!: number;
}
