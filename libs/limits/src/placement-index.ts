/**
 * place() for a fleet that changes a few hosts at a time: the same answers, without scoring
 * every host on every request.
 *
 * Placing a shard changes one host. place() still scores all of them (8,000 GPUs for a
 * 1,000-host fleet) on the next request. The index remembers each host's score per request
 * shape (everything in a request but its name) and scores again only the hosts reported by
 * `changed` since; picking the best host is then a pass over remembered numbers. When no
 * host fits, place() itself explains why for every host (rare, and it reads everything).
 *
 * The contract: the hosts and GPUs given to `reset` may be changed in place (reserved bytes,
 * state), but every change must be reported with `changed(hostId)` before the next `place`;
 * adding or removing hosts, or replacing a host object, takes a new `reset`.
 *
 * Spread among near-best hosts (`PlacementSpread`, createShard's path only): several control
 * planes binpacking one fleet all pick the same fullest host and lose their conditional writes
 * to each other (bench/README.md, issue #34). With a spread, the host is chosen among those
 * whose score is within `bandBytes` of the best (binpack; the spread policy's exact ties
 * only), by a hash of the host id mixed with the decider's own seed: one decider keeps filling the host its seed favours while it stays near
 * the best, and two deciders with different seeds mostly favour different hosts.
 */
import type { Host } from './inventory.js';
import {
  place,
  type Placed,
  type PlacementOptions,
  type PlacementRequest,
  type PlacementResult,
} from './placement.js';
import { beats, placedOn, planOf, scoreOn, type Picks, type Plan } from './placement-rules.js';

/** How one decider breaks near-ties between hosts; see the file's comment. */
export interface PlacementSpread {
  /** The decider's own, stable for its life (32 bits are used). */
  readonly seed: number;
  /**
   * Binpack: a host is a candidate when its score is within this many bytes of the best
   * host's. The spread policy: only hosts scoring the same as the best.
   */
  readonly bandBytes: number;
}

/** Request shapes remembered at once; the least recently used one is forgotten first. */
export const PLACEMENT_INDEX_SHAPES = 64;

/** One request shape's memory: each host's score as of the host's generation it saw. */
interface Shape {
  readonly plan: Plan;
  /** Total free bytes of the GPUs the host would give, or NaN when it cannot take the shape. */
  readonly scores: Float64Array;
  /** The host's generation when its score was taken; 0 = never scored. */
  readonly scoredAt: Uint32Array;
}

export class PlacementIndex {
  private hosts: readonly Host[] = [];
  private readonly positions = new Map<string, number>();
  /** Bumped by `changed`; starts at 1, so that a fresh shape (all 0) scores every host. */
  private generations = new Uint32Array(0);
  private readonly shapes = new Map<string, Shape>();
  private readonly picks: Picks = { gpus: [], free: [], count: 0 };
  /** Each host id's hash under `hashedSeed`, filled when a spread first asks after a reset. */
  private seededHashes = new Uint32Array(0);
  private hashedSeed: number | undefined;

  constructor(private readonly options: PlacementOptions = {}) {}

  /** Takes a new fleet (host ids unique); forgets every remembered score. */
  reset(fleet: readonly Host[]): void {
    this.hosts = fleet;
    this.positions.clear();
    fleet.forEach((host, position) => this.positions.set(host.id, position));
    if (this.positions.size !== fleet.length) throw new RangeError('host ids must be unique');
    this.generations = new Uint32Array(fleet.length).fill(1);
    this.shapes.clear();
    this.hashedSeed = undefined;
  }

  /** The host changed in place (reserved bytes, state, ...); unknown ids are ignored. */
  changed(hostId: string): void {
    const position = this.positions.get(hostId);
    if (position === undefined) return;
    // Wraps after 2^32 changes of one host to 0, which no shape's memory takes for current.
    this.generations[position] = (this.generations[position]! + 1) >>> 0 || 1;
  }

  /**
   * What place(request, fleet, options) answers for the fleet as it is now; with a spread, a
   * host within its band of place()'s host (see the file's comment).
   */
  place(request: PlacementRequest, spread?: PlacementSpread): PlacementResult {
    return this.tryPlace(request, spread) ?? place(request, this.hosts, this.options);
  }

  /** place() when a host can take the request; undefined, without explaining why, when none can. */
  tryPlace(request: PlacementRequest, spread?: PlacementSpread): Placed | undefined {
    const shape = this.shapeOf(request);
    const { plan, scores, scoredAt } = shape;
    const { hosts, generations } = this;
    let best: { host: Host; hostId: string; score: number } | undefined;
    for (let position = 0; position < hosts.length; position++) {
      const host = hosts[position]!;
      if (scoredAt[position] !== generations[position]) {
        scores[position] = scoreOn(host, plan, this.picks);
        scoredAt[position] = generations[position]!;
      }
      const score = scores[position]!;
      if (!Number.isNaN(score) && beats(plan, score, host.id, best)) {
        best = { host, hostId: host.id, score };
      }
    }
    if (best === undefined) return undefined;
    if (spread === undefined) return placedOn(best.host, plan, this.picks);
    return placedOn(hosts[this.spreadPick(plan, scores, best.score, spread)]!, plan, this.picks);
  }

  /** The position of the host, among those within the band of `bestScore`, the seed favours. */
  private spreadPick(
    plan: Plan,
    scores: Float64Array,
    bestScore: number,
    spread: PlacementSpread,
  ): number {
    const hashes = this.hashesFor(spread.seed);
    // The spread policy takes the emptiest host: a band there would keep one decider filling
    // the host its seed favours, the opposite of what was asked. Only its exact ties move.
    const band = plan.order === 1 ? spread.bandBytes : 0;
    let chosen = -1;
    for (let position = 0; position < scores.length; position++) {
      const score = scores[position]!;
      // NaN (cannot take the shape) fails the comparison.
      if (!(plan.order * (score - bestScore) <= band)) continue;
      if (
        chosen < 0 ||
        hashes[position]! < hashes[chosen]! ||
        (hashes[position] === hashes[chosen] && this.hosts[position]!.id < this.hosts[chosen]!.id)
      ) {
        chosen = position;
      }
    }
    return chosen;
  }

  private hashesFor(seed: number): Uint32Array {
    const wanted = seed >>> 0;
    if (this.hashedSeed !== wanted) {
      this.seededHashes = Uint32Array.from(this.hosts, (host) => seededHash(wanted, host.id));
      this.hashedSeed = wanted;
    }
    return this.seededHashes;
  }

  private shapeOf(request: PlacementRequest): Shape {
    const plan = planOf(request, this.options);
    const key = JSON.stringify([
      plan.bytesPerGpu,
      plan.gpuCount,
      plan.order,
      plan.filter.include ?? [],
      plan.filter.exclude ?? [],
      plan.selector,
      plan.computeShare,
      // GUARANTEED and CAPPED shares fit alike; an ISOLATED one fits in the partitions.
      plan.computeMode === 'ISOLATED',
    ]);
    let shape = this.shapes.get(key);
    if (shape !== undefined) {
      // Map keeps insertion order: moving the shape to the end keeps the oldest first.
      this.shapes.delete(key);
    } else {
      if (this.shapes.size >= PLACEMENT_INDEX_SHAPES) {
        this.shapes.delete(this.shapes.keys().next().value!);
      }
      shape = {
        plan,
        scores: new Float64Array(this.hosts.length),
        scoredAt: new Uint32Array(this.hosts.length),
      };
    }
    this.shapes.set(key, shape);
    return shape;
  }
}

/** FNV-1a over the text's code units from a seeded basis, then murmur3's finaliser. */
function seededHash(seed: number, text: string): number {
  let h = (0x811c9dc5 ^ seed) >>> 0;
  for (let i = 0; i < text.length; i++) h = Math.imul(h ^ text.charCodeAt(i), 0x01000193);
  h ^= h >>> 16;
  h = Math.imul(h, 0x85ebca6b);
  h ^= h >>> 13;
  h = Math.imul(h, 0xc2b2ae35);
  h ^= h >>> 16;
  return h >>> 0;
}
