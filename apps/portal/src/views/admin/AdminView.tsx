import { Fleet } from './Fleet.js';
import { SignInMapping } from './SignInMapping.js';
import { Teams } from './Teams.js';
import { Tokens } from './Tokens.js';

export function AdminView({ page }: { page: string }) {
  if (page === 'teams') return <Teams />;
  if (page === 'tokens') return <Tokens />;
  if (page === 'sign-in') return <SignInMapping />;
  return <Fleet />;
}
