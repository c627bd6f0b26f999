import { Fleet } from './Fleet.js';
import { Teams } from './Teams.js';
import { Tokens } from './Tokens.js';

export function AdminView({ page }: { page: string }) {
  if (page === 'teams') return <Teams />;
  if (page === 'tokens') return <Tokens />;
  return <Fleet />;
}
