import { Injectable } from '@nestjs/common';
import { Gauge, Registry } from 'prom-client';

/** Fleet-wide series; the fleet module sets them as hosts register, heartbeat and go away. */
@Injectable()
export class FleetMetrics {
  readonly hostsByState: Gauge<'state'>;

  constructor(registry: Registry) {
    this.hostsByState = new Gauge({
      name: 'gpushards_hosts',
      help: 'Hosts known to the control plane, by state (ONLINE, OFFLINE, CORDONED, DRAINING).',
      labelNames: ['state'],
      registers: [registry],
    });
  }
}
