/**
 * What callers send to place a shard: the placement request that createShard and
 * placementPreview share, createShard's whole input, and environment entries. These are
 * GraphQL input types only; shard-input.ts validates them into a ShardRequest. Separate from
 * the shard's output type because the two change for different reasons (the API's accepted
 * input versus what it shows of a shard). ComputeMode and PlacementPolicy come registered as
 * GraphQL enums from shard-enums.ts.
 */
import { Field, ID, InputType, Int } from '@nestjs/graphql';
import { LabelInput } from '../fleet/label.model.js';
import { ComputeMode, PlacementPolicy } from './shard-enums.js';

@InputType()
export class EnvVarInput {
  @Field()
  name!: string;

  @Field()
  value!: string;
}

@InputType({ description: 'Where a shard may go; shared by createShard and placementPreview.' })
export class PlacementInput {
  @Field({
    description:
      'Memory on each GPU, like "12g" or "1536m" (1024-based). Percentages are refused: GPUs differ in size.',
  })
  memoryPerGpu!: string;

  @Field(() => Int, { nullable: true, description: 'GPUs on one host; default 1.' })
  gpuCount?: number | null;

  @Field(() => [String], {
    nullable: true,
    description:
      'Case-insensitive parts of GPU model names to choose from ("H100"); any when empty.',
  })
  gpuModelInclude?: string[] | null;

  @Field(() => [String], { nullable: true, description: 'Parts of GPU model names to avoid.' })
  gpuModelExclude?: string[] | null;

  @Field(() => [LabelInput], {
    nullable: true,
    description: 'Labels the host must carry with exactly these values.',
  })
  hostSelector?: LabelInput[] | null;

  @Field(() => PlacementPolicy, { nullable: true, description: 'Default BINPACK.' })
  placementPolicy?: PlacementPolicy | null;

  @Field(() => Int, {
    nullable: true,
    description:
      "Compute share of each GPU, whole percent 1-100, within the team's maxComputeSharePercent; placement keeps the shares guaranteed on one GPU at most 100%. Left out: none (an equal split of what the shares leave, at least 5%; guarantees nothing).",
  })
  computeSharePercent?: number | null;

  @Field(() => ComputeMode, {
    nullable: true,
    description:
      'Default GUARANTEED. CAPPED and ISOLATED need computeSharePercent; ISOLATED is placed only on hosts with an isolated partition, within it.',
  })
  computeMode?: ComputeMode | null;

  @Field(() => ID, {
    nullable: true,
    description:
      'The team the shard is for. Admins must name one; others may leave it out (their own team) and may name no other.',
  })
  teamId?: string | null;
}

@InputType()
export class CreateShardInput extends PlacementInput {
  @Field({
    description:
      '1 to 63 of a-z, 0-9, ".", "_" and "-", starting and ending with a letter or digit.',
  })
  name!: string;

  @Field({
    description:
      'Container image reference, like "ghcr.io/org/trainer:1.2" (at most 512 characters).',
  })
  image!: string;

  @Field(() => [String], {
    nullable: true,
    description: "Arguments; left out: the image's default.",
  })
  command?: string[] | null;

  @Field(() => [EnvVarInput], {
    nullable: true,
    description:
      'Environment; keys the agent sets (LD_PRELOAD, CUDA_*, NVIDIA_*, GPUSHARDS_*, ...) are refused.',
  })
  env?: EnvVarInput[] | null;

  @Field(() => [EnvVarInput], {
    nullable: true,
    description:
      'Secret environment: stored encrypted, given to the container, never returned by the API or carried by events (Shard.secretEnv shows the names only). Same rules as env; a name may not be in both.',
  })
  secretEnv?: EnvVarInput[] | null;

  @Field(() => String, {
    nullable: true,
    description:
      "A retried createShard with the team's same key returns the first shard instead of placing another.",
  })
  idempotencyKey?: string | null;

  @Field(() => Boolean, {
    nullable: true,
    description:
      'Default true: a request that fits nowhere now (but could fit the fleet) waits as PENDING. false: NO_CAPACITY at once, as without a queue.',
  })
  queue?: boolean | null;

  @Field(() => String, {
    nullable: true,
    description:
      'Priority class: "inference" (never preempted, only within the team\'s guarantee) > "build" (default) > "training".',
  })
  priorityClass?: string | null;

  @Field(() => Int, {
    nullable: true,
    description: 'Seconds it may wait as PENDING before it ends as EXPIRED; left out: no limit.',
  })
  maxWaitSeconds?: number | null;

  @Field(() => Boolean, {
    nullable: true,
    description:
      'Default true: a shard stopped to give its capacity back waits as PENDING again. false: it ends as PREEMPTED.',
  })
  requeue?: boolean | null;

  @Field(() => Boolean, {
    nullable: true,
    description:
      "Elastic (docs/elastic.md): while idle its GPU memory may be suspended to its host's RAM to make room, and a reclaim suspends it instead of stopping it; it resumes on its own GPUs when a process needs the GPU. Needs its team's quota to allow it (allowElastic). Default false.",
  })
  elastic?: boolean | null;
}
