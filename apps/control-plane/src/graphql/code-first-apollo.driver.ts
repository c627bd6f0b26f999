import { ApolloDriver, type ApolloDriverConfig } from '@nestjs/apollo';
import { isObjectType, lexicographicSortSchema, type GraphQLSchema } from 'graphql';

/** A resolver map as NestJS's resolvers explorer gives it: per type, per field. */
export type ResolverMap = Readonly<Record<string, Readonly<Record<string, unknown>>>>;

/**
 * What the driver reads of @nestjs/graphql's GraphQLFactory: its own services (the package
 * exports neither). The test "the schema served binds the resolvers the framework binds"
 * compares the result with the framework's own build, so a change there shows.
 */
interface GraphQLFactoryServices {
  readonly resolversExplorerService?: {
    explore(): ResolverMap;
    getAllCtors(): unknown[];
  };
  readonly gqlSchemaBuilder?: {
    build(
      autoSchemaFile: ApolloDriverConfig['autoSchemaFile'],
      options: ApolloDriverConfig,
      resolvers: unknown[],
    ): Promise<GraphQLSchema>;
  };
}

/**
 * ApolloDriver with the code-first schema built once. NestJS's GraphQLFactory builds the schema
 * from the decorators' metadata, prints it to SDL, parses that and builds it again with the
 * resolvers (makeExecutableSchema), then copies the resolvers back onto the first build's fields
 * and serves that: the second build only carries the resolvers, and cost about as much as the
 * first (0.3 s of a restart's CPU). This sets the resolvers on the first build's fields
 * directly (bindResolvers), as that copy does. Anything it does not handle the same way (a
 * schema or resolvers given in the options, a transformSchema, a resolver on a type that is not
 * an object type) goes the framework's way.
 */
export class CodeFirstApolloDriver extends ApolloDriver {
  override generateSchema(options: ApolloDriverConfig): Promise<GraphQLSchema> | null {
    const { resolversExplorerService: explorer, gqlSchemaBuilder: builder } = this
      .graphQlFactory as unknown as GraphQLFactoryServices;
    if (
      !options.autoSchemaFile ||
      options.schema !== undefined ||
      options.resolvers !== undefined ||
      options.transformSchema !== undefined ||
      explorer === undefined ||
      builder === undefined
    ) {
      return super.generateSchema(options);
    }
    return this.buildOnce(options, explorer, builder);
  }

  private async buildOnce(
    options: ApolloDriverConfig,
    explorer: NonNullable<GraphQLFactoryServices['resolversExplorerService']>,
    builder: NonNullable<GraphQLFactoryServices['gqlSchemaBuilder']>,
  ): Promise<GraphQLSchema> {
    const resolvers = explorer.explore();
    const schema = await builder.build(options.autoSchemaFile, options, explorer.getAllCtors());
    if (!bindsOnlyObjectTypes(resolvers, schema)) {
      const framework = await super.generateSchema(options);
      if (framework === null) throw new Error('the GraphQL factory built no schema');
      return framework;
    }
    bindResolvers(schema, resolvers);
    return options.sortSchema ? lexicographicSortSchema(schema) : schema;
  }
}

/** Whether every type the map names is an object type of `schema`. */
function bindsOnlyObjectTypes(resolvers: ResolverMap, schema: GraphQLSchema): boolean {
  return Object.keys(resolvers).every((typeName) => isObjectType(schema.getType(typeName)));
}

/**
 * Sets each resolver of the map on its field of `schema` (in place), as GraphQLFactory's copy
 * from its executable schema does: a function is the field's resolve; an object gives resolve
 * and subscribe (a subscription). Fields named `__…` (resolveType, isTypeOf) are not fields:
 * the framework's copy leaves them too. A resolver for a type or field the schema does not have
 * is an error, as makeExecutableSchema's check makes it.
 */
export function bindResolvers(schema: GraphQLSchema, resolvers: ResolverMap): void {
  for (const [typeName, fieldResolvers] of Object.entries(resolvers)) {
    const type = schema.getType(typeName);
    if (!isObjectType(type)) {
      throw new Error(`resolvers for ${typeName}, which is not an object type of the schema`);
    }
    const fields = type.getFields();
    for (const [fieldName, resolver] of Object.entries(fieldResolvers)) {
      if (fieldName.startsWith('__')) continue;
      const field = fields[fieldName];
      if (field === undefined) {
        throw new Error(`a resolver for ${typeName}.${fieldName}, which the schema does not have`);
      }
      if (typeof resolver === 'function') {
        field.resolve = resolver as typeof field.resolve;
      } else if (typeof resolver === 'object' && resolver !== null) {
        const { resolve, subscribe } = resolver as Pick<typeof field, 'resolve' | 'subscribe'>;
        if (resolve !== undefined) field.resolve = resolve;
        if (subscribe !== undefined) field.subscribe = subscribe;
      }
    }
  }
}
