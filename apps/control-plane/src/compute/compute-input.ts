import {
  describeComputeRefusal,
  resolveComputeShare,
  type ComputeRefusal,
  type ComputeShare,
  type TeamComputePolicy,
} from '@gpushards/limits';
import type { ComputeShareSpec } from '@gpushards/protocol';
import type { ComputeMode } from '../database/index.js';
import { QuotaExceededError } from '../errors/domain-errors.js';
import type { InputCheck } from '../validation/input.js';

/**
 * A compute share as given (percent, mode), checked on its own: a whole percent 1-100, a
 * CAPPED mode only with a share. Problems go to `check` under `<prefix>.computeSharePercent` /
 * `<prefix>.computeMode`; the team's bound is checked in the transaction (teamComputeRefusal).
 */
export function checkComputeInput(
  check: InputCheck,
  prefix: string,
  sharePercent: number | null | undefined,
  mode: ComputeMode | null | undefined,
): ComputeShare {
  const resolved = resolveComputeShare({ sharePercent: sharePercent ?? null, mode: mode ?? null });
  if (resolved.ok) return resolved.value;
  const field =
    resolved.refusal.kind === 'invalid-share'
      ? `${prefix}.computeSharePercent`
      : `${prefix}.computeMode`;
  check.problem(field, describeComputeRefusal(resolved.refusal));
  return { sharePermille: 0, mode: 'GUARANTEED' };
}

/** The team's compute bound in libs/limits terms: NULL = up to 100%, 0 = no shares. */
export function teamComputePolicyOf(maxComputeSharePercent: number | null): TeamComputePolicy {
  if (maxComputeSharePercent === null) return {};
  if (maxComputeSharePercent === 0) return { sharesAllowed: false };
  return { maxSharePercent: maxComputeSharePercent };
}

/** QUOTA_EXCEEDED when the team may not have this share (limit maxComputeSharePercent), else undefined. */
export function teamComputeRefusal(
  share: ComputeShare,
  maxComputeSharePercent: number | null,
): QuotaExceededError | undefined {
  if (share.sharePermille === 0) return undefined;
  const resolved = resolveComputeShare(
    { sharePercent: share.sharePermille / 10, mode: share.mode },
    teamComputePolicyOf(maxComputeSharePercent),
  );
  if (resolved.ok) return undefined;
  return computeQuotaError(resolved.refusal, maxComputeSharePercent);
}

function computeQuotaError(
  refusal: ComputeRefusal,
  maxComputeSharePercent: number | null,
): QuotaExceededError {
  return new QuotaExceededError(describeComputeRefusal(refusal), {
    limit: 'maxComputeSharePercent',
    ...(maxComputeSharePercent === null ? {} : { maxComputeSharePercent }),
  });
}

/** The mode as the agent's launch spec and limits file spell it. */
export function computeSpecOf(share: {
  readonly sharePermille: number;
  readonly mode: ComputeMode;
}): ComputeShareSpec {
  return { sharePermille: share.sharePermille, mode: COMPUTE_SPEC_MODES[share.mode] };
}

const COMPUTE_SPEC_MODES: Record<ComputeMode, ComputeShareSpec['mode']> = {
  GUARANTEED: 'guaranteed',
  CAPPED: 'capped',
  ISOLATED: 'isolated',
};
