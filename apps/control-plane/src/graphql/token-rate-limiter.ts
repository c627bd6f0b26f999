import { fullBucket, takeToken, type BucketRule, type TokenBucket } from '@gpushards/limits';
import type { TokenLimits } from '../auth/caller.js';
import type { ApiLimits } from '../config/api-limits.js';
import { RateLimitedError } from '../errors/domain-errors.js';

interface TokenState {
  bucket: TokenBucket;
  running: number;
  rule: BucketRule;
  maxConcurrent: number;
}

/** Tokens tracked at most; past it, idle tokens with a full bucket are forgotten. */
const MAX_TRACKED_TOKENS = 10_000;

/**
 * Per-token admission: a token bucket (libs/limits) for the rate and a count of requests
 * running for the concurrency. `admit` throws RATE_LIMITED (with retryAfterSeconds) or returns
 * the function to call once the request is answered.
 */
export class TokenRateLimiter {
  private readonly tokens = new Map<string, TokenState>();
  private readonly rule: BucketRule;

  constructor(
    private readonly limits: Pick<ApiLimits, 'ratePerSecond' | 'rateBurst' | 'maxConcurrent'>,
    private readonly now: () => number = () => performance.now(),
  ) {
    this.rule = { ratePerSecond: limits.ratePerSecond, burst: limits.rateBurst };
  }

  /** `own`: the token's limits set by an admin (ApiToken.ratePerSecond, ...), over the fleet's. */
  admit(tokenId: string, own?: TokenLimits): () => void {
    const now = this.now();
    const rule: BucketRule = {
      ratePerSecond: own?.ratePerSecond ?? this.rule.ratePerSecond,
      burst: own?.rateBurst ?? this.rule.burst,
    };
    const maxConcurrent = own?.maxConcurrent ?? this.limits.maxConcurrent;
    let state = this.tokens.get(tokenId);
    if (state === undefined) {
      if (this.tokens.size >= MAX_TRACKED_TOKENS) this.forgetIdle(now);
      state = { bucket: fullBucket(rule, now), running: 0, rule, maxConcurrent };
      this.tokens.set(tokenId, state);
    } else if (state.rule.ratePerSecond !== rule.ratePerSecond || state.rule.burst !== rule.burst) {
      // An admin changed the token's limits: what it has left carries over, within the new burst.
      state.bucket = { ...state.bucket, tokens: Math.min(state.bucket.tokens, rule.burst) };
      state.rule = rule;
    }
    state.maxConcurrent = maxConcurrent;
    if (state.running >= maxConcurrent) {
      throw new RateLimitedError(
        `this token already has ${state.running} requests running, the most it may have at once is ${maxConcurrent}`,
        1,
      );
    }
    const taken = takeToken(state.bucket, rule, now);
    state.bucket = taken.bucket;
    if (!taken.allowed) {
      throw new RateLimitedError(
        `this token sent more than ${rule.ratePerSecond} requests per second (bursts up to ${rule.burst}); retry in ${taken.retryAfterMs} ms`,
        Math.ceil(taken.retryAfterMs / 1000),
      );
    }
    state.running++;
    let released = false;
    const counted = state;
    return () => {
      if (released) return;
      released = true;
      counted.running--;
    };
  }

  private forgetIdle(now: number): void {
    for (const [tokenId, state] of this.tokens) {
      const full =
        state.bucket.tokens + ((now - state.bucket.at) * state.rule.ratePerSecond) / 1000 >=
        state.rule.burst;
      if (state.running === 0 && full) this.tokens.delete(tokenId);
    }
  }
}
