import { Field, ObjectType } from '@nestjs/graphql';
import { formatSize } from '../validation/sizes.js';
import { GraphQLBytes } from './bytes.scalar.js';

/** How every size goes out: exact bytes for programs, a rounded string for people. */
@ObjectType({ description: 'An amount of memory.' })
export class Size {
  @Field(() => GraphQLBytes, { description: 'Exact, in bytes.' })
  bytes!: number;

  @Field({
    description: 'For people, 1024-based and rounded to two decimals: "12 GiB", "1.5 GiB".',
  })
  human!: string;
}

/** Byte counts from the database are bigint; every count here is below 2^53. */
export function sizeOf(bytes: bigint | number): Size {
  const count = Number(bytes);
  return { bytes: count, human: formatSize(count) };
}
