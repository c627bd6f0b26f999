import { Field, InputType, ObjectType } from '@nestjs/graphql';

@ObjectType({ description: 'A key/value label of a host, or a term of a host selector.' })
export class Label {
  @Field()
  key!: string;

  @Field()
  value!: string;
}

@InputType({ description: 'A label a host must carry with exactly this value.' })
export class LabelInput {
  @Field()
  key!: string;

  @Field()
  value!: string;
}

/** Labels as GraphQL lists them: sorted by key. */
export function labelsOf(record: Readonly<Record<string, string>>): Label[] {
  return Object.entries(record)
    .sort(([a], [b]) => (a < b ? -1 : a > b ? 1 : 0))
    .map(([key, value]) => ({ key, value }));
}
