import { Injectable } from '@nestjs/common';
import { BadUserInputError, type FieldProblem } from '../errors/domain-errors.js';
import { FleetCache } from '../placement/fleet-cache.js';
import type { PlacementRequestInput } from './shard-input.js';

/** What only the fleet can refuse in a request, before anything is placed or written. */
@Injectable()
export class ShardFleetCheck {
  constructor(private readonly cache: FleetCache) {}

  /**
   * Input that only the fleet can refuse: more GPUs than any host has, a model filter no GPU
   * passes. The cache is read again before refusing, so a host that just registered counts.
   */
  async check(request: PlacementRequestInput, since: number): Promise<void> {
    let problems = this.problems(request);
    if (problems.length === 0) return;
    await this.cache.refreshedSince(since);
    problems = this.problems(request);
    if (problems.length > 0) throw new BadUserInputError(problems);
  }

  private problems(request: PlacementRequestInput): FieldProblem[] {
    const problems: FieldProblem[] = [];
    const largest = this.cache.maxGpusPerHost();
    if (largest > 0 && request.gpuCount > largest) {
      problems.push({
        field: 'input.gpuCount',
        message: `must be at most ${largest}: no host in the fleet has more GPUs, got ${request.gpuCount}`,
      });
    }
    const { include, exclude } = request.gpuModel;
    const models = this.cache.gpuModels();
    if (
      (include.length > 0 || exclude.length > 0) &&
      models.length > 0 &&
      !this.cache.anyGpuMatches(request.gpuModel)
    ) {
      problems.push({
        field: include.length > 0 ? 'input.gpuModelInclude' : 'input.gpuModelExclude',
        message: `no GPU in the fleet matches the model filter; the fleet has ${models.map((m) => `"${m}"`).join(', ')}`,
      });
    }
    return problems;
  }
}
