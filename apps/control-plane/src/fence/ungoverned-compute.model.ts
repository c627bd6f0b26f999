import { Field, Float, ID, Int, ObjectType } from '@nestjs/graphql';
import { CapPolicy } from './cap-policy.model.js';

@ObjectType({
  description:
    'The compute fence (docs/agent.md, "Compute fence"): the shard\'s processes kept a GPU busy in NVML\'s per-process utilization for two consecutive windows while its compute-ledger member recorded no launch there (kernels launched past libvgpu.so, which no turn governs), and its cap policy was applied.',
})
export class UngovernedCompute {
  @Field(() => ID)
  gpuUuid!: string;

  @Field(() => CapPolicy, {
    description:
      'KILL: the processes below were sent SIGKILL; STOP: the shard is stopped; REPORT: only this event and the metric (once per episode).',
  })
  action!: CapPolicy;

  @Field(() => Int, {
    description: 'The busiest process (host PID) that ran kernels outside the compute ledger.',
  })
  pid!: number;

  @Field(() => Float, { description: 'Its mean smUtil over the window (NVML), percent.' })
  smPercent!: number;

  @Field(() => [Int], {
    description: 'Every process of the shard whose samples reached the threshold, busiest first.',
  })
  pids!: number[];

  @Field(() => Float, {
    description: "The shard's processes' mean smUtil on that GPU, summed (at most 100).",
  })
  busyPercent!: number;

  @Field(() => Int, { description: 'Samples of its processes in the window.' })
  samples!: number;

  @Field(() => Int, { description: 'Of which at or above thresholdPercent.' })
  busySamples!: number;

  @Field(() => Float, { description: 'The smUtil at which a sample counts as busy.' })
  thresholdPercent!: number;

  @Field(() => Float, {
    description: "The window's length (the agent's GPUSHARDS_COMPUTE_FENCE_SECONDS).",
  })
  windowSeconds!: number;

  @Field(() => Date, {
    nullable: true,
    description:
      'When the shard last launched through libvgpu.so on that GPU (before the window); null: never.',
  })
  lastKernelAt!: Date | null;

  @Field(() => [Int], { description: 'The processes killed (KILL).' })
  killedPids!: number[];

  @Field(() => String, { nullable: true, description: 'Why the action failed, when it did.' })
  error!: string | null;

  @Field({
    description:
      'In words, as the CLI prints it: "ungoverned GPU work: pid N ran kernels outside the compute ledger (smUtil X % over 5 s)".',
  })
  message!: string;
}
