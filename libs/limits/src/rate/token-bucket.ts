/**
 * A token bucket, as a value: `rate` tokens per second flow in up to `burst`; a request takes
 * one. Pure: the caller keeps the bucket and passes the time.
 */
export interface TokenBucket {
  /** Tokens in the bucket at `at` (fractional). */
  readonly tokens: number;
  /** Milliseconds (any monotonic clock). */
  readonly at: number;
}

export interface BucketRule {
  /** Tokens added per second, > 0. */
  readonly ratePerSecond: number;
  /** Most tokens the bucket holds, >= 1. */
  readonly burst: number;
}

export type TakeResult =
  | { readonly allowed: true; readonly bucket: TokenBucket }
  | {
      readonly allowed: false;
      readonly bucket: TokenBucket;
      /** When one token will be there, in milliseconds from `now` (> 0). */
      readonly retryAfterMs: number;
    };

/** Far below any token a request could be refused for, far above floating-point error. */
const ROUNDING = 1e-9;

/** A full bucket at `now`. */
export function fullBucket(rule: BucketRule, now: number): TokenBucket {
  return { tokens: rule.burst, at: now };
}

/** The bucket at `now`: refilled for the time since `bucket.at` (never backwards), capped at burst. */
export function refill(bucket: TokenBucket, rule: BucketRule, now: number): TokenBucket {
  const elapsed = Math.max(0, now - bucket.at);
  return {
    tokens: Math.min(rule.burst, bucket.tokens + (elapsed * rule.ratePerSecond) / 1000),
    at: Math.max(now, bucket.at),
  };
}

/** Takes one token at `now` if there is one; otherwise says how long until there is. */
export function takeToken(bucket: TokenBucket, rule: BucketRule, now: number): TakeResult {
  const current = refill(bucket, rule, now);
  // A refill over exactly the retryAfterMs this function gave can land a rounding error short
  // of a whole token (0.01/s over 4,680 ms after 0.9532 tokens): that counts as the token.
  if (current.tokens >= 1 - ROUNDING) {
    return { allowed: true, bucket: { tokens: Math.max(0, current.tokens - 1), at: current.at } };
  }
  const retryAfterMs = Math.max(1, Math.ceil(((1 - current.tokens) * 1000) / rule.ratePerSecond));
  return { allowed: false, bucket: current, retryAfterMs };
}
