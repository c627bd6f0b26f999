import { Field, ID, InputType, Int, ObjectType } from '@nestjs/graphql';
import { Connection } from '../graphql/connection.js';
import { Size } from '../graphql/size.model.js';

@ObjectType({ description: 'A group of people whose shards share one quota.' })
export class Team {
  @Field(() => ID)
  id!: string;

  @Field({ description: 'Unique; lower-case letters, digits and hyphens.' })
  name!: string;

  @Field()
  createdAt!: Date;

  @Field(() => Date, {
    nullable: true,
    description:
      'Set while archived (archiveTeam): no new shards and its tokens refused; null: active.',
  })
  archivedAt!: Date | null;
}

@ObjectType()
export class TeamConnection extends Connection(Team) {}

@ObjectType({ description: 'What deleteTeam did.' })
export class TeamDeletion {
  @Field(() => ID)
  id!: string;

  @Field({ description: 'The name it had.' })
  name!: string;

  @Field({
    description:
      'True: deleted. False: its live shards were asked to stop (drainFirst); call deleteTeam again once stoppingShards is 0.',
  })
  deleted!: boolean;

  @Field(() => Int, { description: 'Its shards still stopping.' })
  stoppingShards!: number;
}

@ObjectType({
  description: 'What a team may hold at once. Without one, a team cannot place shards.',
})
export class QuotaPolicy {
  @Field(() => Size, { description: "The team's shards together (requested bytes of all GPUs)." })
  maxTotal!: Size;

  @Field(() => Int)
  maxShards!: number;

  @Field(() => Size, { description: 'One shard, over all its GPUs.' })
  maxPerShard!: Size;

  @Field(() => Int, { nullable: true, description: 'GPUs of one shard; null = no limit.' })
  maxGpusPerShard!: number | null;

  @Field(() => [String], { description: 'GPU models the team may use; empty = every model.' })
  allowedGpuModels!: string[];

  @Field(() => [String], {
    description:
      "Image prefixes the team's shards may use (as GPUSHARDS_IMAGE_ALLOW_LIST: registry, repository or path, compared after Docker's normalisation, at a boundary), beside the fleet's list: an image must pass both. Empty = any image.",
  })
  allowedImages!: string[];

  @Field(() => Int, { description: 'Higher goes first when placement must choose between teams.' })
  priority!: number;

  @Field(() => Size, {
    description:
      "Requested bytes promised whatever other teams do: up to it the team's shards are never preempted for another team; above it (up to maxTotal) they borrow idle capacity and may be reclaimed.",
  })
  guarantee!: Size;

  @Field(() => Int, { nullable: true, description: 'Whole GPUs promised; null = none.' })
  guaranteeGpus!: number | null;

  @Field(() => String, {
    nullable: true,
    description: 'The GPU models the guarantee is on (part of the model name); null = any.',
  })
  guaranteeGpuModel!: string | null;

  @Field(() => String, {
    nullable: true,
    description: 'The highest priority class its shards may use; null = any.',
  })
  maxPriorityClass!: string | null;

  @Field(() => Int, {
    nullable: true,
    description:
      'The largest compute share per GPU one shard may ask for, percent; 0: none (its shards get the default split only); null: up to 100.',
  })
  maxComputeSharePercent!: number | null;

  @Field({
    description:
      "Whether the team's shards may be elastic (docs/elastic.md): suspended to host RAM while idle to make room, and by a reclaim instead of a stop.",
  })
  allowElastic!: boolean;

  @Field()
  updatedAt!: Date;
}

@ObjectType({ description: 'What a team holds now: its shards that hold a reservation.' })
export class TeamUsage {
  @Field(() => Size, {
    description: 'Requested bytes of those shards (per GPU × GPUs), as quotas count.',
  })
  reserved!: Size;

  @Field(() => Int)
  shardCount!: number;
}

@InputType({
  description: 'Sizes are strings like "48g", "1536m" or "2t" (1024-based); "0" allows none.',
})
export class QuotaPolicyInput {
  @Field()
  maxTotal!: string;

  @Field(() => Int)
  maxShards!: number;

  @Field()
  maxPerShard!: string;

  @Field(() => Int, { nullable: true, description: 'Null or left out: no limit.' })
  maxGpusPerShard?: number | null;

  @Field(() => [String], { nullable: true, description: 'Left out or empty: every model.' })
  allowedGpuModels?: string[] | null;

  @Field(() => [String], {
    nullable: true,
    description:
      'Image prefixes like "ghcr.io/acme/" or "registry.example.com:5000"; empty: any image (the fleet\'s list still applies); left out or null: the team keeps its list (none for a new policy: any image).',
  })
  allowedImages?: string[] | null;

  @Field(() => Int, { nullable: true, description: 'Default 0.' })
  priority?: number | null;

  @Field(() => String, {
    nullable: true,
    description:
      'Guaranteed memory (size string, at most maxTotal); default "0". All teams\' guarantees together must fit the fleet per GPU model.',
  })
  guarantee?: string | null;

  @Field(() => Int, { nullable: true, description: 'Guaranteed whole GPUs; left out: none.' })
  guaranteeGpus?: number | null;

  @Field(() => String, {
    nullable: true,
    description: 'Part of a GPU model name the guarantee is on ("H100"); left out: any model.',
  })
  guaranteeGpuModel?: string | null;

  @Field(() => String, {
    nullable: true,
    description: 'The highest priority class the team may use ("build"); left out: any.',
  })
  maxPriorityClass?: string | null;

  @Field(() => Int, {
    nullable: true,
    description:
      'The largest compute share per GPU one shard may ask for, 0 to 100 percent (0: no shares); left out: up to 100.',
  })
  maxComputeSharePercent?: number | null;

  @Field(() => Boolean, {
    nullable: true,
    description:
      "Whether the team's shards may be elastic (createShard elastic: true). Left out: the team keeps its setting (false for a new policy).",
  })
  allowElastic?: boolean | null;
}
