import { Field, Float, Int, ObjectType, registerEnumType } from '@nestjs/graphql';

export enum IdleActionKind {
  REPORT = 'REPORT',
  STOP = 'STOP',
  SUSPEND = 'SUSPEND',
}

registerEnumType(IdleActionKind, {
  name: 'IdleActionKind',
  valuesMap: {
    REPORT: { description: 'Reported idle (the warning before any action).' },
    STOP: { description: "Stopped by its team's idle policy." },
    SUSPEND: {
      description: "Elastic: its GPU memory suspended to host RAM by its team's idle policy.",
    },
  },
});

@ObjectType({
  description:
    'What a team does with its running shards that launch no kernel (docs/compute.md, "Idle policy").',
})
export class IdlePolicy {
  @Field(() => Int, {
    description: 'Seconds without a kernel on any of its GPUs before a shard is reported idle.',
  })
  idleAfterSeconds!: number;

  @Field(() => Int, {
    nullable: true,
    description: 'Seconds without a kernel before it is stopped; null: reported only.',
  })
  stopAfterSeconds!: number | null;

  @Field(() => Int, {
    nullable: true,
    description:
      'Seconds without a kernel before an elastic shard is suspended to host RAM instead (its work kept; it resumes when a process needs the GPU); null: never. Shards that are not elastic are stopped or reported as the rest of the policy says.',
  })
  suspendAfterSeconds!: number | null;
}

@ObjectType({ description: "A shard found idle by its team's idle policy, and what was done." })
export class IdleNotice {
  @Field(() => IdleActionKind)
  action!: IdleActionKind;

  @Field({ description: 'Its last kernel on any GPU (its start, if it never launched one).' })
  idleSince!: Date;

  @Field(() => Float)
  idleSeconds!: number;
}
