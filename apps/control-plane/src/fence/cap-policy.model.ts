import { Field, ID, Int, ObjectType, registerEnumType } from '@nestjs/graphql';
import { CapPolicy } from '../database/index.js';
import { Size } from '../graphql/size.model.js';

registerEnumType(CapPolicy, {
  name: 'CapPolicy',
  description:
    "What a host's agent does to a shard whose real GPU memory (NVML, per process) passes its cap plus the host's tolerance (docs/agent.md).",
  valuesMap: {
    KILL: {
      description:
        'SIGKILL the processes of the shard holding the most on that GPU until it is back under its cap, as the kernel OOM killer would (the default).',
    },
    STOP: { description: 'Stop the whole shard (its container is kept).' },
    REPORT: { description: 'Only report it: a VIOLATION event and the metrics.' },
  },
});

export { CapPolicy };

@ObjectType({
  description:
    'A shard passed its memory cap on one GPU, measured from outside the container (NVML), and its policy was applied.',
})
export class CapViolation {
  @Field(() => ID)
  gpuUuid!: string;

  @Field(() => Size, { description: "What the shard's processes held on that GPU." })
  real!: Size;

  @Field(() => Size)
  cap!: Size;

  @Field(() => Size, { description: 'How far past the cap real usage may go before any action.' })
  tolerance!: Size;

  @Field(() => CapPolicy)
  action!: CapPolicy;

  @Field(() => Int, { description: 'The process (host PID) holding the most on that GPU.' })
  pid!: number;

  @Field(() => Size)
  processMemory!: Size;

  @Field(() => [Int], { description: 'The processes killed (KILL).' })
  killedPids!: number[];

  @Field(() => String, { nullable: true, description: 'Why the action failed, when it did.' })
  error!: string | null;
}
