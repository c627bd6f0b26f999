import { Injectable } from '@nestjs/common';
import { Histogram, Registry } from 'prom-client';

/** How a createShard's placement ended, the histogram's `result` label. */
export type PlacementOutcome = 'placed' | 'replayed' | 'no_capacity' | 'quota_exceeded' | 'error';

@Injectable()
export class PlacementMetrics {
  private readonly duration: Histogram<'result'>;

  constructor(registry: Registry) {
    this.duration = new Histogram({
      name: 'gpushards_placement_duration_seconds',
      help:
        'createShard from the start of its transaction to commit or refusal: team lock, quota, ' +
        'placement, conditional reservation and the shard row, retries included.',
      labelNames: ['result'],
      buckets: [0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5],
      registers: [registry],
    });
  }

  observe(result: PlacementOutcome, seconds: number): void {
    this.duration.observe({ result }, seconds);
  }
}
