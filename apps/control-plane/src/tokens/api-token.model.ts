import { Field, ID, Int, ObjectType } from '@nestjs/graphql';
import { Role } from '../auth/caller.js';
import { Connection } from '../graphql/connection.js';

@ObjectType({ description: 'A bearer token. Its secret is shown only once, when it is created.' })
export class ApiToken {
  @Field(() => ID)
  id!: string;

  @Field()
  name!: string;

  @Field(() => Role)
  role!: Role;

  @Field({
    description: 'The first characters of the secret, to tell tokens apart ("gps_Ab12Cd").',
  })
  prefix!: string;

  /** Resolved by a field resolver into `team`; null for fleet-wide admin tokens. */
  teamId!: string | null;

  @Field()
  createdAt!: Date;

  @Field(() => Date, { nullable: true, description: 'Updated at most once a minute.' })
  lastUsedAt!: Date | null;

  @Field(() => Date, { nullable: true })
  revokedAt!: Date | null;

  @Field(() => Int, {
    nullable: true,
    description:
      "Requests per second it may send (its bucket's refill); null: the fleet's GPUSHARDS_RATE_LIMIT_PER_SECOND.",
  })
  ratePerSecond!: number | null;

  @Field(() => Int, {
    nullable: true,
    description:
      "Requests it may send at once in a burst; null: the fleet's GPUSHARDS_RATE_LIMIT_BURST.",
  })
  rateBurst!: number | null;

  @Field(() => Int, {
    nullable: true,
    description:
      "Requests it may have running at once; null: the fleet's GPUSHARDS_MAX_CONCURRENT_REQUESTS.",
  })
  maxConcurrent!: number | null;
}

@ObjectType()
export class ApiTokenConnection extends Connection(ApiToken) {}

@ObjectType()
export class CreatedApiToken {
  @Field(() => ApiToken)
  token!: ApiToken;

  @Field({
    description:
      'The secret, for "Authorization: Bearer <secret>". Shown only now: the server keeps only its hash.',
  })
  secret!: string;
}
