import { Field, ID, ObjectType } from '@nestjs/graphql';
import { Role } from '../auth/caller.js';
import { Team } from '../teams/team.model.js';

@ObjectType({
  description: 'Someone who signed in through OpenID Connect, as their provider named them.',
})
export class Person {
  @Field(() => ID)
  id!: string;

  @Field({ description: "The provider's stable id for them (the ID token's sub)." })
  subject!: string;

  @Field(() => String, { nullable: true })
  email!: string | null;

  @Field(() => String, { nullable: true })
  name!: string | null;

  @Field(() => [String], { description: 'Their provider groups at their last sign-in.' })
  groups!: string[];

  @Field()
  lastSignInAt!: Date;
}

@ObjectType({ description: 'One thing a signed-in person may act as.' })
export class Membership {
  @Field(() => Team, { nullable: true, description: 'Null for the fleet-wide ADMIN membership.' })
  team!: Team | null;

  @Field(() => Role)
  role!: Role;
}

@ObjectType({ description: "A person's browser session (docs/identity.md)." })
export class Session {
  @Field(() => ID)
  id!: string;

  @Field(() => Person)
  person!: Person;

  @Field(() => [Membership], {
    description:
      'What their groups gave at sign-in (the mapping); selectTeam switches between them.',
  })
  memberships!: Membership[];

  @Field()
  expiresAt!: Date;
}

@ObjectType({
  description:
    "An admin's rule: people whose provider groups include `group` get `role` in `team` (null: ADMIN of the fleet) at their next sign-in.",
})
export class GroupMapping {
  @Field(() => ID)
  id!: string;

  @Field()
  group!: string;

  @Field(() => Team, { nullable: true })
  team!: Team | null;

  /** Resolved into `team`. */
  teamId!: string | null;

  @Field(() => Role)
  role!: Role;

  @Field()
  createdAt!: Date;
}
