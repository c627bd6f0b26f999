/**
 * placementPreview's answer: where a request would go now, or why it cannot go anywhere, with
 * every host's reason. Kept beside placement-preview.service.ts, which builds it, rather than
 * with the shard's own types: it describes a request, not a shard.
 */
import { Field, ID, Int, ObjectType } from '@nestjs/graphql';
import { Size } from '../graphql/size.model.js';

@ObjectType({ description: 'Why one host cannot take a request.' })
export class HostVerdict {
  @Field(() => ID)
  hostId!: string;

  @Field()
  hostName!: string;

  @Field({
    description:
      'host-offline, host-cordoned, host-draining, label-mismatch, model-excluded, no-isolated-partition (an ISOLATED share asked, and the host runs no isolated partition) or not-enough-gpus.',
  })
  kind!: string;

  @Field({ description: 'For people, sizes formatted.' })
  reason!: string;
}

@ObjectType({ description: 'Where a request would go now, or why it cannot go anywhere.' })
export class PlacementPreview {
  @Field({
    description:
      'RUN_NOW: it fits and nothing waits. WAIT: createShard would answer PENDING (it fits nowhere now but could fit the fleet, or shards wait ahead of it; it goes first if it fits without taking room kept for them). NEVER_FITS: refused at once (no host could ever take it).',
  })
  verdict!: string;

  @Field(() => Int, {
    description: 'PENDING shards in the queue now (as of the last admission pass).',
  })
  waitingAhead!: number;

  @Field()
  fits!: boolean;

  @Field(() => ID, { nullable: true })
  hostId!: string | null;

  @Field(() => String, { nullable: true })
  hostName!: string | null;

  @Field(() => [ID], {
    description: 'The GPUs it would take, by index; empty when it does not fit.',
  })
  gpuUuids!: string[];

  @Field(() => Size, {
    nullable: true,
    description:
      "What each of those GPUs would reserve (memoryPerGpu + the host's context overhead).",
  })
  reservedPerGpu!: Size | null;

  @Field({ description: 'A summary for people.' })
  message!: string;

  @Field(() => [HostVerdict], { description: 'When it does not fit: every host, with its reason.' })
  hosts!: HostVerdict[];

  @Field(() => String, {
    nullable: true,
    description:
      "Why the team's quota would refuse it now (createShard checks quota first), if it would.",
  })
  quotaProblem!: string | null;
}
