import { GraphQLError, GraphQLScalarType, Kind } from 'graphql';

const DIGITS = /^(0|[1-9]\d{0,15})$/;

function toByteCount(value: unknown): number {
  if (typeof value === 'number' && Number.isSafeInteger(value) && value >= 0) return value;
  if (typeof value === 'string' && DIGITS.test(value)) {
    const count = Number(value);
    if (Number.isSafeInteger(count)) return count;
  }
  throw new GraphQLError(
    'Bytes must be a whole number of bytes from 0 to 2^53 − 1, written as a string of digits like "12884901888"',
  );
}

/**
 * Byte counts go out as strings of decimal digits: GPU sizes pass 2^31 (GraphQL's Int) and
 * JSON numbers past 2^53 lose digits in many parsers, while a string is exact everywhere.
 * Values are at most 2^53 − 1 (what libs/limits computes with). Inputs take the same
 * string, or a JSON integer.
 */
export const GraphQLBytes = new GraphQLScalarType<number, string>({
  name: 'Bytes',
  description:
    'A whole number of bytes (0 to 2^53 − 1) as a string of decimal digits, like "12884901888" for 12 GiB. ' +
    'A string keeps the value exact in every JSON parser.',
  serialize(value) {
    if (typeof value === 'bigint' && value >= 0n && value <= BigInt(Number.MAX_SAFE_INTEGER)) {
      return value.toString();
    }
    return String(toByteCount(value));
  },
  parseValue: toByteCount,
  parseLiteral(ast) {
    if (ast.kind === Kind.STRING || ast.kind === Kind.INT)
      return toByteCount(ast.kind === Kind.INT ? Number(ast.value) : ast.value);
    throw new GraphQLError('Bytes must be a string of digits like "12884901888"', { nodes: ast });
  },
});
