/** The fleet picture's data: each GPU's memory as a bar split by team. */

export interface FleetGpu {
  readonly uuid: string;
  readonly capacityBytes: number;
  readonly reservedBytes: number;
}

export interface FleetShard {
  readonly team: string;
  readonly gpus: readonly { gpuUuid: string; reservedBytes: number; released: boolean }[];
}

export interface Segment {
  readonly team: string | null;
  readonly bytes: number;
  /** Share of the bar, 0..1. */
  readonly fraction: number;
}

/**
 * Segments of one GPU's bar: one per team holding a live reservation on it (largest first),
 * then "other" for what the GPU reserves that no listed shard explains (shards beyond the page
 * or of teams the caller may not see), then free. Fractions add up to at most 1.
 */
export function gpuSegments(gpu: FleetGpu, shards: readonly FleetShard[]): Segment[] {
  const byTeam = new Map<string, number>();
  for (const shard of shards) {
    for (const g of shard.gpus) {
      if (g.gpuUuid !== gpu.uuid || g.released) continue;
      byTeam.set(shard.team, (byTeam.get(shard.team) ?? 0) + g.reservedBytes);
    }
  }
  const total = Math.max(gpu.capacityBytes, gpu.reservedBytes, 1);
  const segments: Segment[] = [...byTeam.entries()]
    .sort((a, b) => b[1] - a[1] || a[0].localeCompare(b[0]))
    .map(([team, bytes]) => ({ team, bytes, fraction: bytes / total }));
  const explained = segments.reduce((n, s) => n + s.bytes, 0);
  if (gpu.reservedBytes > explained) {
    const bytes = gpu.reservedBytes - explained;
    segments.push({ team: 'other', bytes, fraction: bytes / total });
  }
  const free = Math.max(0, gpu.capacityBytes - Math.max(gpu.reservedBytes, explained));
  segments.push({ team: null, bytes: free, fraction: free / total });
  return segments;
}

/** A stable colour per team name, so a team keeps its colour across GPUs and reloads. */
export function teamColor(team: string): string {
  let hash = 0;
  for (const ch of team) hash = (hash * 31 + ch.charCodeAt(0)) >>> 0;
  return `hsl(${hash % 360} 60% 45%)`;
}
