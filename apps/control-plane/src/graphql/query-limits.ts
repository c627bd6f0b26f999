import { maxAliasesRule } from '@escape.tech/graphql-armor-max-aliases';
import { maxDepthRule } from '@escape.tech/graphql-armor-max-depth';
import {
  getNamedType,
  GraphQLError as GraphQLErrorClass,
  isListType,
  isNonNullType,
  Kind,
  type ASTVisitor,
  type DocumentNode,
  type GraphQLError,
  type GraphQLOutputType,
  type GraphQLSchema,
  type ValidationContext,
  visit,
} from 'graphql';
import { getComplexity, type ComplexityEstimator } from 'graphql-query-complexity';
import type { ApiLimits } from '../config/api-limits.js';
import { QueryTooComplexError } from '../errors/domain-errors.js';
import { DEFAULT_PAGE_SIZE } from './connection.js';

/** What a list without `first` (a shard's GPUs, a host's labels) counts as: GPUs per host. */
export const UNPAGED_LIST_SIZE = 16;

function foundIn(error: GraphQLError): number {
  return Number(/found (\d+)/.exec(error.message)?.[1] ?? NaN);
}

/** A validation error whose originalError is `error` (formatError answers with its code). */
function reported(error: QueryTooComplexError): GraphQLErrorClass {
  return new GraphQLErrorClass(error.message, { originalError: error });
}

/**
 * A validation rule that refuses, on entering the document, an operation nested deeper than
 * `maxDepth` or holding more than `maxAliases` aliases (graphql-armor's counters), as
 * QUERY_TOO_COMPLEX naming the limit and the figure. The other rules still walk the document
 * (Apollo answers an error thrown from validation as an internal error); parseOptions.maxTokens
 * bounds what they can be made to do.
 */
export function earlyQueryLimitsRule(
  limits: Pick<ApiLimits, 'maxDepth' | 'maxAliases'>,
): (context: ValidationContext) => ASTVisitor {
  return (context) => {
    const depth = maxDepthRule({
      n: limits.maxDepth,
      propagateOnRejection: false,
      onReject: [
        (_context, error) => {
          context.reportError(
            reported(new QueryTooComplexError('depth', limits.maxDepth, foundIn(error))),
          );
        },
      ],
    })(context);
    const aliases = maxAliasesRule({
      n: limits.maxAliases,
      propagateOnRejection: false,
      onReject: [
        (_context, error) => {
          context.reportError(
            reported(new QueryTooComplexError('aliases', limits.maxAliases, foundIn(error))),
          );
        },
      ],
    })(context);
    return {
      Document: {
        enter(document) {
          for (const definition of document.definitions) {
            if (definition.kind !== Kind.OPERATION_DEFINITION) continue;
            depth.onOperationDefinitionEnter(definition);
            aliases.onOperationDefinitionEnter(definition);
          }
        },
      },
    };
  };
}

function isList(type: GraphQLOutputType): boolean {
  return isListType(isNonNullType(type) ? type.ofType : type);
}

/**
 * The cost model: every field costs 1 plus what it selects; a field with `first` (a connection)
 * multiplies what it selects by the page size asked for (default DEFAULT_PAGE_SIZE); a
 * connection's `edges` list is that page, not multiplied again; any other list multiplies by
 * UNPAGED_LIST_SIZE. So `shards(first: 500) { edges { node { host { shards(first: 500) …` costs
 * 500 × 500 × … and is refused before it runs.
 */
const pageEstimator: ComplexityEstimator = ({ field, args, childComplexity }) => {
  if (field.args.some((arg) => arg.name === 'first')) {
    const first = typeof args['first'] === 'number' ? args['first'] : DEFAULT_PAGE_SIZE;
    return 1 + Math.max(first, 1) * childComplexity;
  }
  if (isList(field.type)) {
    const itemType = getNamedType(field.type);
    const pageOfConnection = field.name === 'edges' && itemType.name.endsWith('Edge');
    return 1 + (pageOfConnection ? 1 : UNPAGED_LIST_SIZE) * childComplexity;
  }
  return 1 + childComplexity;
};

/**
 * The operation's cost (throws QUERY_TOO_COMPLEX past `maxNodes` fields visited). Variables
 * that do not coerce count as cost 0 here (`onUncounted` is told): execution answers them
 * with its own error.
 */
export function queryCost(
  schema: GraphQLSchema,
  document: DocumentNode,
  variables: Readonly<Record<string, unknown>>,
  operationName: string | undefined,
  maxNodes: number,
  onUncounted: () => void = () => {},
): number {
  try {
    return getComplexity({
      schema,
      query: document,
      variables: { ...variables },
      ...(operationName === undefined ? {} : { operationName }),
      estimators: [pageEstimator],
      maxQueryNodes: maxNodes,
    });
  } catch (error) {
    if (/maximum allowed number of nodes/.test((error as Error).message)) {
      throw new QueryTooComplexError(
        'fields',
        maxNodes,
        maxNodes + 1,
        'fields visited, counting each alias and fragment spread',
      );
    }
    onUncounted();
    return 0;
  }
}

interface DocumentCosts {
  /** The variables the cost depends on: those in `first` and in directives (@skip, @include). */
  readonly costVariables: readonly string[];
  /** Cost by operation name and those variables' values. */
  readonly byKey: Map<string, number>;
}

/** Costs remembered per document, at most (a document asked with many page sizes). */
const COSTS_PER_DOCUMENT = 64;

/**
 * queryCost, remembered per document (Apollo hands the same DocumentNode for a query text it
 * has parsed before) and per value of the variables the cost depends on: createShard's input
 * changes every call, its cost does not. Only costs that were computed are remembered (not
 * a refusal, not variables that failed to coerce).
 */
export class QueryCostCache {
  private readonly documents = new WeakMap<DocumentNode, DocumentCosts>();

  constructor(private readonly maxNodes: number) {}

  cost(
    schema: GraphQLSchema,
    document: DocumentNode,
    variables: Readonly<Record<string, unknown>>,
    operationName: string | undefined,
  ): number {
    let costs = this.documents.get(document);
    if (costs === undefined) {
      costs = { costVariables: costVariablesOf(document), byKey: new Map() };
      this.documents.set(document, costs);
    }
    const key = JSON.stringify([
      operationName ?? null,
      ...costs.costVariables.map((name) => variables[name] ?? null),
    ]);
    const known = costs.byKey.get(key);
    if (known !== undefined) return known;
    let computed = true;
    const cost = queryCost(schema, document, variables, operationName, this.maxNodes, () => {
      computed = false;
    });
    if (computed && costs.byKey.size < COSTS_PER_DOCUMENT) costs.byKey.set(key, cost);
    return cost;
  }
}

function costVariablesOf(document: DocumentNode): string[] {
  const names = new Set<string>();
  const collect = (node: Parameters<typeof visit>[0]) =>
    visit(node, { Variable: (variable) => void names.add(variable.name.value) });
  visit(document, {
    Argument(argument) {
      if (argument.name.value === 'first') collect(argument.value);
    },
    Directive(directive) {
      collect(directive);
    },
  });
  return [...names].sort();
}

/** Throws QUERY_TOO_COMPLEX when `cost` is over `budget`. */
export function checkCost(cost: number, budget: number, role: string): void {
  if (cost > budget) {
    throw new QueryTooComplexError(
      'cost',
      budget,
      cost,
      `the ${role} budget; lists multiply what they select by their page size`,
    );
  }
}
