import { Injectable } from '@nestjs/common';
import { Counter, Registry } from 'prom-client';

/** The lifecycle actions people take on teams, shards and hosts, counted as they commit. */
export type LifecycleAction =
  | 'team.rename'
  | 'team.archive'
  | 'team.unarchive'
  | 'team.drain'
  | 'team.delete'
  | 'shard.start'
  | 'host.remove';

/** gpushards_lifecycle_actions_total{action}: one per committed change (none for a no-op). */
@Injectable()
export class LifecycleMetrics {
  private readonly actions: Counter<'action'>;

  constructor(registry: Registry) {
    this.actions = new Counter({
      name: 'gpushards_lifecycle_actions_total',
      help: 'Lifecycle changes committed, by action (team.rename, team.archive, team.unarchive, team.drain, team.delete, shard.start, host.remove).',
      labelNames: ['action'],
      registers: [registry],
    });
  }

  committed(action: LifecycleAction): void {
    this.actions.inc({ action });
  }
}
