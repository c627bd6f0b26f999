/**
 * Which hosts have a GPU with room for a need, without looking at every GPU of the fleet.
 *
 * An admission pass after one freeing event starts from the hosts that can take some shard of
 * its queue (AdmissionRoom's candidates): ONLINE, with a GPU whose free bytes reach the
 * smallest need. On a full fleet of 1,000 hosts that is one host, found by a look at 8,000 GPUs.
 * The index keeps, per host, a bound on what any of its GPUs can take: the most memory one of
 * them has left (total − unowned − reserved; free bytes are never above it), −1 for a host that
 * is not ONLINE. Hosts are kept in buckets by the bound's power of two, so the hosts that may
 * have room for a need are those of the need's bucket and above: on a full fleet, the hosts
 * where room was freed. It answers a superset; the caller still applies its exact rule
 * (freeBytes, the oversubscription ratio) to those hosts' GPUs.
 *
 * The contract is PlacementIndex's: the hosts and GPUs given to `reset` may be changed in place
 * (reserved bytes, unowned bytes, state), but every change must be reported with
 * `changed(hostId)` before the next question; adding, removing or replacing hosts takes a new
 * `reset`. A changed host's bound is worked out again when the next question is asked.
 */
import type { Host } from './inventory.js';

/** A bound below 1 byte (no memory left, or not ONLINE) goes here. */
const NO_ROOM = -1;

export class RoomIndex {
  private hosts: readonly Host[] = [];
  private readonly positions = new Map<string, number>();
  /** Per host (by position), its bucket: floor(log2(bound)), or NO_ROOM. */
  private bucketOf = new Int8Array(0);
  /** Per host (by position), its bound in bytes. */
  private bounds = new Float64Array(0);
  /** bucket + 1 → the positions of the hosts in it. */
  private buckets: Set<number>[] = [];
  /** Positions of hosts changed since their bound was last worked out. */
  private readonly dirty = new Set<number>();

  /** Takes a new fleet (host ids unique). */
  reset(fleet: readonly Host[]): void {
    this.hosts = fleet;
    this.positions.clear();
    fleet.forEach((host, position) => this.positions.set(host.id, position));
    if (this.positions.size !== fleet.length) throw new RangeError('host ids must be unique');
    this.bucketOf = new Int8Array(fleet.length).fill(NO_ROOM);
    this.bounds = new Float64Array(fleet.length);
    this.buckets = [];
    this.dirty.clear();
    for (let position = 0; position < fleet.length; position++) this.dirty.add(position);
  }

  /** The host changed in place (reserved or unowned bytes, state); unknown ids are ignored. */
  changed(hostId: string): void {
    const position = this.positions.get(hostId);
    if (position !== undefined) this.dirty.add(position);
  }

  /**
   * The hosts (in the fleet's order) that may have a GPU with `need` bytes free: every ONLINE
   * host with a GPU whose memory left reaches it, and perhaps others. A need of 0 or less
   * answers every host.
   */
  hostsThatMayFit(need: number): Host[] {
    if (!(need > 0)) return [...this.hosts];
    this.settle();
    const positions: number[] = [];
    // From one bucket below the need's: a bound and a need of one power of two may round apart.
    for (let slot = bucketFor(need); slot < this.buckets.length; slot++) {
      for (const position of this.buckets[slot] ?? []) {
        if (this.bounds[position]! >= need) positions.push(position);
      }
    }
    return positions.sort((a, b) => a - b).map((position) => this.hosts[position]!);
  }

  private settle(): void {
    for (const position of this.dirty) {
      const bound = boundOf(this.hosts[position]!);
      const bucket = bound >= 1 ? bucketFor(bound) : NO_ROOM;
      this.bounds[position] = bound;
      const old = this.bucketOf[position]!;
      if (old === bucket && this.buckets[old + 1]?.has(position) === true) continue;
      this.buckets[old + 1]?.delete(position);
      (this.buckets[bucket + 1] ??= new Set()).add(position);
      this.bucketOf[position] = bucket;
    }
    this.dirty.clear();
  }
}

/** floor(log2(bytes)) for bytes ≥ 1: at most 62 for any byte count a GPU has. */
function bucketFor(bytes: number): number {
  return Math.floor(Math.log2(bytes));
}

/** The most memory any GPU of the host has left; NO_ROOM when it is not ONLINE. */
function boundOf(host: Host): number {
  if (host.state !== 'ONLINE') return NO_ROOM;
  let bound = NO_ROOM;
  for (const gpu of host.gpus) {
    const left = gpu.totalBytes - (gpu.unownedBytes ?? 0) - gpu.reservedBytes;
    if (left > bound) bound = left;
  }
  return bound;
}
