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

  constructor(private readonly options: PlacementOptions = {}) {}

  /** Takes a new fleet (host ids unique); forgets every remembered score. */
  reset(fleet: readonly Host[]): void {
    this.hosts = fleet;
    this.positions.clear();
    fleet.forEach((host, position) => this.positions.set(host.id, position));
    if (this.positions.size !== fleet.length) throw new RangeError('host ids must be unique');
    this.generations = new Uint32Array(fleet.length).fill(1);
    this.shapes.clear();
  }

  /** The host changed in place (reserved bytes, state, ...); unknown ids are ignored. */
  changed(hostId: string): void {
    const position = this.positions.get(hostId);
    if (position === undefined) return;
    // Wraps after 2^32 changes of one host to 0, which no shape's memory takes for current.
    this.generations[position] = (this.generations[position]! + 1) >>> 0 || 1;
  }

  /** What place(request, fleet, options) answers for the fleet as it is now. */
  place(request: PlacementRequest): PlacementResult {
    return this.tryPlace(request) ?? place(request, this.hosts, this.options);
  }

  /** place() when a host can take the request; undefined, without explaining why, when none can. */
  tryPlace(request: PlacementRequest): Placed | undefined {
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
    return placedOn(best.host, plan, this.picks);
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
