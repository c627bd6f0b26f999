import { Args, Float, ID, Int, Mutation, Resolver } from '@nestjs/graphql';
import { Role, type Caller } from '../auth/caller.js';
import { CurrentCaller, MinRole } from '../auth/decorators.js';
import { Shard, shardView } from '../shards/shard.model.js';
import { ElasticService } from './elastic.service.js';

/** Elastic memory's operations (docs/elastic.md); the fields are on Shard and QuotaPolicy. */
@Resolver()
export class ElasticResolver {
  constructor(private readonly elastic: ElasticService) {}

  @Mutation(() => Shard, {
    description:
      "Moves a RUNNING shard's GPU memory to its host's RAM (SUSPENDING, then SUSPENDED: its GPUs are given back to placement and the queue; its processes keep running on the CPU and wait at their next GPU call). Any shard of your team, elastic or not. NOT_SUSPENDABLE when its host does not suspend or its host-RAM budget is taken. A suspend its host's agent refuses (a process of the shard holds GPU memory another process shared with it, over CUDA IPC or a VMM shareable handle, which the driver cannot restore) or its driver fails ends as SUSPEND_FAILED: the shard RUNNING again on its GPU, the reason in memory.lastError. Already suspending or suspended: unchanged.",
  })
  async suspendShard(@CurrentCaller() caller: Caller, @Args('id', { type: () => ID }) id: string) {
    return shardView(await this.elastic.suspend(caller, id));
  }

  @Mutation(() => Shard, {
    description:
      "Asks for a SUSPENDED shard's memory back: it resumes (RESUMING, then RUNNING) as soon as its own GPUs have room, in queue order. A process of the shard asking for the GPU does the same by itself. Already resuming or running: unchanged.",
  })
  async resumeShard(@CurrentCaller() caller: Caller, @Args('id', { type: () => ID }) id: string) {
    return shardView(await this.elastic.resume(caller, id));
  }

  @MinRole(Role.ADMIN)
  @Mutation(() => Int, {
    description:
      "Sets the oversubscription ratio of a host's GPUs (or of one): the caps of their shards, resident and suspended, may add up to floor(memory × ratio). Only elastic shards take the part past the memory, by being suspended. 1 (the default): none. CONFLICT if the caps already there exceed the new bound. Returns how many GPUs were set.",
  })
  async setGpuOvercommit(
    @CurrentCaller() caller: Caller,
    @Args('hostId', { type: () => ID }) hostId: string,
    @Args('ratio', { type: () => Float }) ratio: number,
    @Args('gpuUuid', { type: () => ID, nullable: true }) gpuUuid?: string | null,
  ): Promise<number> {
    return this.elastic.setOvercommit(caller, hostId, gpuUuid ?? null, ratio);
  }
}
