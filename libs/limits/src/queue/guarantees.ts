/**
 * Guarantees: what a team is promised whatever other teams do. Up to its guarantee a team's
 * shards are never preempted for another team; above it (up to its limit) it borrows idle
 * capacity, and what it borrows may be reclaimed.
 *
 * A guarantee is memory (requested bytes, as quota counts them: no context overhead) and
 * optionally whole GPUs, on the GPUs whose model matches an optional term ("H100"; absent =
 * any model). Promises must be keepable: for every set of terms, the guarantees on those terms
 * may not exceed what the GPUs matching any of them can hold (floor(total × overcommit)), nor
 * their count of GPUs. With one term per model this is "the sum of guarantees ≤ capacity per
 * GPU model"; with overlapping terms ("H100" and any) it is the exact condition (Hall's) for
 * every team to get its guarantee at once.
 */
import { type Bytes, bytes, formatSize } from '../sizes.js';
import type { Host } from '../inventory.js';
import {
  capacityBytes,
  matchesGpuModel,
  type PlacementOptions,
  type PlacementRequest,
} from '../placement.js';
import { compareText } from '../placement-rules.js';
import { effectiveGpuModelFilter } from '../quota.js';

export interface Guarantee {
  /** Requested bytes the team is promised; 0 = none. */
  readonly bytes: Bytes;
  /** Whole GPUs the team is promised; absent = no GPU count promised. */
  readonly gpus?: number;
  /** Case-insensitive substring of GPU model names; absent = any model. */
  readonly gpuModel?: string;
}

export const NO_GUARANTEE: Guarantee = { bytes: bytes(0) };

/** Whether a GPU of this model counts towards the guarantee. */
export function guaranteeCovers(guarantee: Guarantee, model: string): boolean {
  const term = guarantee.gpuModel?.trim();
  return term === undefined || term === '' || matchesGpuModel(model, { include: [term] });
}

/** The request limited to the GPUs a guarantee covers; undefined when it asks for others. */
export function withinGuaranteeRequest(
  request: PlacementRequest,
  term: string | undefined,
): PlacementRequest | undefined {
  if (term === undefined || term.trim() === '') return request;
  const filter = effectiveGpuModelFilter(request.gpuModel, { allowedGpuModels: [term] });
  return filter.ok ? { ...request, gpuModel: filter.filter } : undefined;
}

export interface TeamGuarantee {
  readonly teamId: string;
  /** For messages; the id when absent. */
  readonly teamName?: string;
  readonly guarantee: Guarantee;
}

export type GuaranteeCheck =
  | { readonly ok: true }
  | {
      readonly ok: false;
      readonly what: 'bytes' | 'gpus';
      /** The terms whose guarantees together exceed what their GPUs hold ('' = any model). */
      readonly terms: readonly string[];
      readonly guaranteed: number;
      readonly capacity: number;
      readonly message: string;
    };

/** Subsets of more terms than this are checked one term at a time and all together only. */
const EXACT_TERMS = 12;

function termOf(guarantee: Guarantee): string {
  return guarantee.gpuModel?.trim().toLowerCase() ?? '';
}

function describeTerms(terms: readonly string[]): string {
  if (terms.includes('')) return 'any GPU model';
  return `GPU model${terms.length === 1 ? '' : 's'} ${terms.map((t) => `"${t}"`).join(', ')}`;
}

/**
 * Whether all the guarantees can be kept at once on these hosts. Pass the fleet the promise is
 * made on (registered hosts, whatever their state today).
 */
export function checkGuarantees(
  teams: readonly TeamGuarantee[],
  fleet: readonly Host[],
  options: PlacementOptions = {},
): GuaranteeCheck {
  for (const team of teams) {
    const { bytes: b, gpus } = team.guarantee;
    if (!Number.isSafeInteger(b) || b < 0) {
      throw new RangeError(`guarantee of ${team.teamName ?? team.teamId} must be bytes ≥ 0`);
    }
    if (gpus !== undefined && (!Number.isSafeInteger(gpus) || gpus < 0)) {
      throw new RangeError(`guaranteed GPUs of ${team.teamName ?? team.teamId} must be ≥ 0`);
    }
  }
  const active = teams.filter((t) => t.guarantee.bytes > 0 || (t.guarantee.gpus ?? 0) > 0);
  const terms = [...new Set(active.map((t) => termOf(t.guarantee)))].sort();
  if (terms.length === 0) return { ok: true };
  const gpus = fleet.flatMap((host) => host.gpus);
  const matches = (term: string, model: string): boolean =>
    term === '' || model.toLowerCase().includes(term);
  const subsets: string[][] = [];
  if (terms.length <= EXACT_TERMS) {
    for (let mask = 1; mask < 1 << terms.length; mask++) {
      subsets.push(terms.filter((_, i) => mask & (1 << i)));
    }
  } else {
    subsets.push(...terms.map((t) => [t]), terms);
  }
  for (const subset of subsets) {
    const members = active
      .filter((t) => subset.includes(termOf(t.guarantee)))
      .sort((a, b) => compareText(a.teamName ?? a.teamId, b.teamName ?? b.teamId));
    const covered = gpus.filter((gpu) => subset.some((term) => matches(term, gpu.model)));
    const capacity = covered.reduce(
      (sum, gpu) => sum + capacityBytes(gpu, options.defaultOvercommitRatio),
      0,
    );
    const guaranteed = members.reduce((sum, t) => sum + t.guarantee.bytes, 0);
    const name = (t: TeamGuarantee): string => t.teamName ?? t.teamId;
    if (guaranteed > capacity) {
      const each = members.map((t) => `${name(t)} ${formatSize(t.guarantee.bytes)}`).join(', ');
      return {
        ok: false,
        what: 'bytes',
        terms: subset,
        guaranteed,
        capacity,
        message:
          `guarantees on ${describeTerms(subset)} total ${formatSize(bytes(guaranteed))} ` +
          `(${each}) > ${formatSize(bytes(capacity))} that the fleet's ${covered.length} ` +
          `matching GPU${covered.length === 1 ? '' : 's'} can hold`,
      };
    }
    const guaranteedGpus = members.reduce((sum, t) => sum + (t.guarantee.gpus ?? 0), 0);
    if (guaranteedGpus > covered.length) {
      const each = members
        .filter((t) => (t.guarantee.gpus ?? 0) > 0)
        .map((t) => `${name(t)} ${t.guarantee.gpus}`)
        .join(', ');
      return {
        ok: false,
        what: 'gpus',
        terms: subset,
        guaranteed: guaranteedGpus,
        capacity: covered.length,
        message:
          `guaranteed GPUs on ${describeTerms(subset)} total ${guaranteedGpus} (${each}) > ` +
          `${covered.length} matching GPU${covered.length === 1 ? '' : 's'} in the fleet`,
      };
    }
  }
  return { ok: true };
}
