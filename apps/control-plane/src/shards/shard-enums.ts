/**
 * The shard enums the GraphQL types show (ShardState, ComputeMode, PlacementPolicy), registered
 * with GraphQL here, once. Every model, argument or resolver that names one in a GraphQL type
 * imports it from this module, not from the database: importing the enum is what registers it,
 * so no type depends on another module having been imported first (shard-enums.test.ts).
 */
import { registerEnumType } from '@nestjs/graphql';
import { ComputeMode, PlacementPolicy, ShardState } from '../database/index.js';

export { ComputeMode, PlacementPolicy, ShardState };

registerEnumType(ShardState, {
  name: 'ShardState',
  description: 'Where a shard is in its life; see docs/api.md for the transitions.',
  valuesMap: {
    PENDING: {
      description: 'Waits in the queue for capacity; holds no GPUs, counts against quota.',
    },
    PLACED: { description: 'GPUs reserved; the agent has not reported it starting yet.' },
    STARTING: { description: 'The agent is pulling the image or starting the container.' },
    RUNNING: { description: 'The container runs.' },
    SUSPENDING: {
      description:
        "Elastic: its processes' GPU memory is being moved to host RAM; still holds its GPUs.",
    },
    SUSPENDED: {
      description:
        'Elastic: its container runs with its GPU memory in host RAM; holds no GPU, counts against quota. Its next CUDA call that needs the GPU asks for a resume (docs/elastic.md).',
    },
    RESUMING: {
      description: 'Elastic: room taken again on its own GPUs; its memory is moving back.',
    },
    STOPPING: {
      description: 'Asked to stop; still holds its reservation until the agent reports.',
    },
    STOPPED: { description: 'Stopped on request; reservation released, container kept.' },
    EXITED: { description: 'Its process ended on its own (exitCode); reservation released.' },
    FAILED: { description: 'Could not launch or keep running (failureReason); released.' },
    LOST: {
      description:
        'Its host went OFFLINE; reservation released. Counts against quota until deleted or back.',
    },
    PREEMPTED: {
      description: 'Stopped to give its capacity to a shard with a better claim; not requeued.',
    },
    EXPIRED: { description: 'Waited in the queue past its maximum wait; never ran.' },
    DELETED: { description: 'Deleted; kept for the record.' },
  },
});

registerEnumType(ComputeMode, {
  name: 'ComputeMode',
  description: "How a shard's compute share holds (docs/compute.md).",
  valuesMap: {
    GUARANTEED: {
      description:
        'At least its share of each GPU while the GPU is contended, and any time nobody else wants (work-conserving). The default.',
    },
    CAPPED: { description: 'Never more than its share, even alone (predictable cost or latency).' },
    ISOLATED: {
      description:
        "Its share of the GPU's SMs in an MPS partition of its own, on a host that runs one (Host.computeIsolatedPoolPercent > 0): never more than its share, and its latency held whatever its neighbours do (they run outside the partition). Needs computeSharePercent; the share is fixed while the shard holds its GPUs (stop it and start it with another).",
    },
  },
});

registerEnumType(PlacementPolicy, {
  name: 'PlacementPolicy',
  valuesMap: {
    BINPACK: { description: 'Fill the fullest GPUs that fit (keeps whole GPUs free).' },
    SPREAD: { description: 'Use the emptiest GPUs (spreads load and blast radius).' },
  },
});
