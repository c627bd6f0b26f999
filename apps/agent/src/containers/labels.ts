/** Docker labels the agent puts on every shard container, and finds them by. */
export const LABELS = {
  managed: 'io.gpushards.managed',
  shard: 'io.gpushards.shard',
  team: 'io.gpushards.team',
  host: 'io.gpushards.host',
  /** The shard's GPU UUIDs, comma-separated, in the order of CUDA_DEVICE_MEMORY_LIMIT_<i>. */
  gpus: 'io.gpushards.gpus',
} as const;

/** The Docker name of a shard's container: unique per host, so a second create is refused. */
export function containerName(hostId: string, shardId: string): string {
  return `gpushards-${hostId}-${shardId}`;
}

/** Docker label filters for every shard container of one host. */
export function hostLabelFilters(hostId: string): string[] {
  return [`${LABELS.managed}=true`, `${LABELS.host}=${hostId}`];
}
