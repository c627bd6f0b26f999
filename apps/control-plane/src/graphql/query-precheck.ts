import { maxAliasesRule } from '@escape.tech/graphql-armor-max-aliases';
import { maxDepthRule } from '@escape.tech/graphql-armor-max-depth';
import {
  GraphQLError,
  Kind,
  parse,
  type DocumentNode,
  type FragmentDefinitionNode,
  type ValidationContext,
} from 'graphql';
import type { FastifyInstance } from 'fastify';
import type { ApiLimits } from '../config/api-limits.js';
import { QueryTooComplexError } from '../errors/domain-errors.js';

type Limits = Pick<ApiLimits, 'maxTokens' | 'maxDepth' | 'maxAliases'>;

function foundIn(error: GraphQLError): number {
  return Number(/found (\d+)/.exec(error.message)?.[1] ?? NaN);
}

/**
 * The size limits that need no schema, checked on the query text before Apollo, Nest and
 * graphql-js validation see it: tokens (parse stops past maxTokens), depth and aliases
 * (graphql-armor's counters, given the document's fragments). Returns the refusal, or
 * undefined when the query is within them or is not a parsable query (Apollo answers that).
 * Validation runs the same depth and alias rule again (earlyQueryLimitsRule) for what does not
 * come through here (GET, graphql-ws).
 */
export function precheckQuery(query: string, limits: Limits): QueryTooComplexError | undefined {
  let document: DocumentNode;
  try {
    document = parse(query, { maxTokens: limits.maxTokens, noLocation: true });
  } catch (error) {
    const tokens = /Document contains more th\w+ (\d+) tokens/.exec((error as Error).message);
    return tokens === null
      ? undefined
      : new QueryTooComplexError('tokens', limits.maxTokens, limits.maxTokens + 1);
  }
  const fragments = new Map<string, FragmentDefinitionNode>();
  for (const definition of document.definitions) {
    if (definition.kind === Kind.FRAGMENT_DEFINITION) {
      fragments.set(definition.name.value, definition);
    }
  }
  // The counters read fragments through the context only.
  const context = {
    getFragment: (name: string) => fragments.get(name),
  } as unknown as ValidationContext;
  let refusal: QueryTooComplexError | undefined;
  const depth = maxDepthRule({
    n: limits.maxDepth,
    propagateOnRejection: false,
    onReject: [
      (_context, error) => {
        refusal ??= new QueryTooComplexError('depth', limits.maxDepth, foundIn(error));
      },
    ],
  })(context);
  const aliases = maxAliasesRule({
    n: limits.maxAliases,
    propagateOnRejection: false,
    onReject: [
      (_context, error) => {
        refusal ??= new QueryTooComplexError('aliases', limits.maxAliases, foundIn(error));
      },
    ],
  })(context);
  for (const definition of document.definitions) {
    if (definition.kind !== Kind.OPERATION_DEFINITION) continue;
    depth.onOperationDefinitionEnter(definition);
    aliases.onOperationDefinitionEnter(definition);
    if (refusal !== undefined) return refusal;
  }
  return undefined;
}

/** Query texts remembered at most, and the longest remembered (a 64 KiB text is a big query). */
const CACHED_TEXTS = 512;
const CACHED_TEXT_LENGTH = 64 * 1024;

/**
 * precheckQuery's answers by query text, least recently used forgotten first: clients send the
 * same few texts again and again (the portal's pages, a bench's createShard, an abuser's
 * loop), and the answer depends on the text and the limits only. Texts over
 * CACHED_TEXT_LENGTH are checked every time (parse stops at maxTokens anyway).
 */
export class PrecheckCache {
  private readonly answers = new Map<string, QueryTooComplexError | null>();

  constructor(
    private readonly limits: Limits,
    private readonly capacity = CACHED_TEXTS,
  ) {}

  check(query: string): QueryTooComplexError | undefined {
    if (query.length > CACHED_TEXT_LENGTH) return precheckQuery(query, this.limits);
    let answer = this.answers.get(query);
    if (answer !== undefined) {
      this.answers.delete(query);
    } else {
      answer = precheckQuery(query, this.limits) ?? null;
      if (this.answers.size >= this.capacity) {
        this.answers.delete(this.answers.keys().next().value as string);
      }
    }
    this.answers.set(query, answer);
    return answer ?? undefined;
  }
}

/**
 * A Fastify preHandler on POST /graphql that answers, as Apollo would (HTTP 400, `errors` with
 * extensions.code QUERY_TOO_COMPLEX), a query over the tokens, depth or aliases limits
 * before Apollo and Nest run at all: the refusal costs a parse, or a lookup for a text seen
 * before (PrecheckCache).
 */
export function useQueryPrecheck(fastify: FastifyInstance, limits: Limits, path: string): void {
  const cache = new PrecheckCache(limits);
  fastify.addHook('preHandler', (request, reply, done) => {
    if (request.method !== 'POST' || request.routeOptions.url !== path) {
      done();
      return;
    }
    const query = (request.body as { query?: unknown } | null | undefined)?.query;
    const refusal = typeof query === 'string' ? cache.check(query) : undefined;
    if (refusal === undefined) {
      done();
      return;
    }
    const { http: _http, ...extensions } = refusal.extensions;
    void reply
      .code(400)
      .header('content-type', 'application/json; charset=utf-8')
      .send({
        errors: [{ message: refusal.message, extensions: { ...extensions, code: refusal.code } }],
      });
  });
}
