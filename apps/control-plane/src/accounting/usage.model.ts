import { Field, Float, ID, Int, ObjectType } from '@nestjs/graphql';
import { Connection } from '../graphql/connection.js';
import { Size } from '../graphql/size.model.js';
import type {
  AccountingWindow,
  ReservationInterval,
  SuspensionInterval,
  UsageSample,
} from '@gpushards/limits';
import { Team } from '../teams/team.model.js';

@ObjectType({ description: 'What one shard held and used over the window.' })
export class ShardUsageReport {
  @Field(() => ID)
  shardId!: string;

  @Field()
  shardName!: string;

  @Field(() => String, { nullable: true, description: 'Null once its host record was deleted.' })
  hostId!: string | null;

  @Field(() => Float, {
    description:
      'GiB-hours reserved: its cap on each GPU (context overhead included) summed over its GPUs, times the time held.',
  })
  reservedGibHours!: number;

  @Field(() => Float, {
    description: 'GiB-hours used, from the usage its agent reported, counted while reserved.',
  })
  usedGibHours!: number;

  @Field(() => Float, {
    description:
      'Elastic (docs/elastic.md): GiB-hours its GPU memory spent suspended in its host RAM (its caps over its GPUs), apart from reservedGibHours: a suspended shard holds no GPU.',
  })
  suspendedGibHours!: number;

  @Field(() => Size, { description: 'The most it used at once over all its GPUs.' })
  peakUsed!: Size;
}

@ObjectType()
export class ShardUsageReportConnection extends Connection(ShardUsageReport) {}

@ObjectType({
  description: "One UTC day of a usage report's window (the part of it in the window).",
})
export class UsageDay {
  @Field({ description: 'The UTC day, like "2026-11-29".' })
  day!: string;

  @Field(() => Float)
  reservedGibHours!: number;

  @Field(() => Float)
  usedGibHours!: number;

  @Field(() => Float)
  suspendedGibHours!: number;

  @Field(() => Size, { description: "The most the team's shards used at once that day." })
  peakUsed!: Size;
}

/** What a report was computed from, kept for its per-day breakdown (not in the schema). */
export interface UsageInputs {
  readonly window: AccountingWindow;
  readonly intervals: readonly ReservationInterval[];
  readonly samples: readonly UsageSample[];
  readonly suspensions: readonly SuspensionInterval[];
}

@ObjectType({
  description:
    "A team's GPU memory over a window [from, to): reserved and used GiB-hours and the peak, in total and per shard.",
})
export class UsageReport {
  @Field(() => Team)
  team!: Team;

  @Field()
  from!: Date;

  @Field()
  to!: Date;

  @Field({
    description:
      'Reservations still held count up to this instant: the earlier of `to` and the time of the query.',
  })
  measuredUntil!: Date;

  @Field(() => Float)
  reservedGibHours!: number;

  @Field(() => Float)
  usedGibHours!: number;

  @Field(() => Float, {
    description: "GiB-hours its shards' GPU memory spent suspended in host RAM (elastic shards).",
  })
  suspendedGibHours!: number;

  @Field(() => Size, {
    description:
      "The most the team's shards used at the same instant (not the sum of peaks that never coincided).",
  })
  peakUsed!: Size;

  @Field(() => Int, { description: 'Shards that held a reservation during the window.' })
  shardCount!: number;

  /** Every shard's report, ordered by shard id; `shards` pages through it. */
  shardReports!: readonly ShardUsageReport[];

  inputs!: UsageInputs;
}
