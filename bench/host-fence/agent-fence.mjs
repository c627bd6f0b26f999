// The agent's host fence as the agent wires it (EnforcementService over LimitsService and
// ProcessOwners), for the fence benches: no Docker, no control plane; the bench says which
// shards there are by pushing records into `shards`, and what the GPUs hold through `gpus`.
import { join } from 'node:path';

/**
 * `gpus`: what the fence reads of GpusService (the listing, and for pressure rings the
 * inventory and lookups). Import after setting any environment the fakes read once.
 * Resolves with the fence, its LimitsService and the records it takes as the shard list.
 */
export async function agentFence(
  agentDist,
  { hostId, stateDir, intervalMs, toleranceBytes, procRoot, gpus },
) {
  const { LimitsService } = await import(join(agentDist, 'limits/limits.service.js'));
  const { EnforcementService } = await import(
    join(agentDist, 'enforcement/enforcement.service.js')
  );
  const { ProcessOwners } = await import(join(agentDist, 'enforcement/process-owners.js'));
  const { AgentMetrics } = await import(join(agentDist, 'metrics/agent-metrics.js'));
  const { RegionWatchService } = await import(join(agentDist, 'regions/region-watch.service.js'));
  const { createLogger } = await import(join(agentDist, 'logging/logger.js'));
  const config = {
    hostId,
    stateDir,
    enforcement: { intervalMs, toleranceBytes, allowedProcesses: [], procRoot },
  };
  const logger = createLogger('silent', 'bench');
  const records = [];
  const shards = { list: () => records, stop: async () => ({ wasRunning: true }) };
  const limits = new LimitsService(config, logger);
  const enforcement = new EnforcementService(
    config,
    gpus,
    shards,
    limits,
    new ProcessOwners(procRoot),
    new AgentMetrics(),
    new RegionWatchService(config, logger),
    logger,
  );
  return { enforcement, limits, records };
}

/**
 * What the fence reads of GpusService, over an NvmlBackend: the inventory (memory of no shard
 * per GPU), the listing (`fresh`: GPUs a pressure ring asks to list afresh), each call run
 * through `around` (which may time it), and the lookups a pressure ring needs.
 */
export function gpusOver(backend, around = (list) => list()) {
  return {
    inventory: { gpus: backend.gpus },
    processes: (watch, fresh) => around(() => backend.processes(watch, fresh)),
    hostIndex: (uuid) => backend.gpus.find((gpu) => gpu.uuid === uuid)?.index,
    canonicalUuid: (uuid) =>
      backend.gpus.find((gpu) => gpu.uuid.toLowerCase() === uuid.toLowerCase())?.uuid ?? uuid,
  };
}
