import type { Role } from '../auth/caller.js';

/**
 * What one request may ask for and how often a token may ask; docs/api.md ("Limits") lists
 * them with the cost model. Every figure is checked before the request runs.
 */
export interface ApiLimits {
  /** Nesting of selections, fragments counted where they are spread. */
  readonly maxDepth: number;
  /** Aliased fields in one operation (`__typename` aliases are free). */
  readonly maxAliases: number;
  /** Lexical tokens of the query text (graphql-js stops parsing past it). */
  readonly maxTokens: number;
  /** Fields the cost model visits (each alias and each fragment spread counted again). */
  readonly maxNodes: number;
  /** The cost budget per role (cost model: docs/api.md). */
  readonly costBudget: Readonly<Record<Role, number>>;
  /** Wall-clock budget of one request, in milliseconds; past it the answer is TIMEOUT. */
  readonly requestTimeoutMs: number;
  /** Per-token token bucket: sustained requests per second... */
  readonly ratePerSecond: number;
  /** ...and the bucket's size (a burst a client may send at once). */
  readonly rateBurst: number;
  /** Requests of one token running at the same time. */
  readonly maxConcurrent: number;
}

/**
 * The defaults. The portal's busiest page asks for 2 queries per second per tab and its
 * largest query (shards, 500 per page, with GPUs and team) costs about 21,000; the budgets are
 * a few times that.
 */
export const DEFAULT_API_LIMITS: ApiLimits = {
  maxDepth: 12,
  maxAliases: 30,
  maxTokens: 10_000,
  maxNodes: 5_000,
  costBudget: { VIEWER: 50_000, MEMBER: 50_000, ADMIN: 200_000 },
  requestTimeoutMs: 10_000,
  ratePerSecond: 50,
  rateBurst: 200,
  maxConcurrent: 16,
};

/** Endpoint switches and what may run; from the environment (docs/deploy.md) or the caller. */
export interface SecurityConfig {
  readonly limits: ApiLimits;
  /** Introspection (`__schema`, `__type`) without a token; default off (a token is needed). */
  readonly publicIntrospection: boolean;
  /** When set, GET /metrics needs `Authorization: Bearer <this>`; default: open. */
  readonly metricsToken: string | null;
  /**
   * Image prefixes a shard's image must start with, after Docker's normalisation
   * ("ubuntu" is "docker.io/library/ubuntu"); empty: any image (the default).
   */
  readonly imageAllowList: readonly string[];
  /** Started without agents on purpose: createShard answers NO_AGENTS. */
  readonly noAgents: boolean;
  /**
   * The request limits (tokens, depth, aliases, cost, time, rate) are applied; false only to
   * measure what they cost (bench/control-plane --limits off). Not settable from the environment.
   */
  readonly enforceLimits: boolean;
}

export const DEFAULT_SECURITY_CONFIG: SecurityConfig = {
  limits: DEFAULT_API_LIMITS,
  publicIntrospection: false,
  metricsToken: null,
  imageAllowList: [],
  noAgents: false,
  enforceLimits: true,
};
