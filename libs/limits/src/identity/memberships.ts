/**
 * What a person signed in through OpenID Connect may do, from their provider groups and the
 * admins' group mapping (docs/identity.md). Decided at sign-in; a group change counts at the
 * next sign-in.
 */

/** The roles a mapping gives (the API's token roles). */
export const MEMBER_ROLES = ['ADMIN', 'MEMBER', 'VIEWER'] as const;
export type MemberRole = (typeof MEMBER_ROLES)[number];

/** An admin's rule: people in `group` get `role` in `teamId` (null with ADMIN: the fleet). */
export interface GroupRule {
  readonly group: string;
  readonly teamId: string | null;
  readonly role: MemberRole;
}

/** One thing a person may act as: ADMIN of the fleet (teamId null), or a role in one team. */
export interface Membership {
  readonly teamId: string | null;
  readonly role: MemberRole;
}

const STRENGTH: Readonly<Record<MemberRole, number>> = { ADMIN: 3, MEMBER: 2, VIEWER: 1 };

export function strongerRole(a: MemberRole, b: MemberRole): MemberRole {
  return STRENGTH[a] >= STRENGTH[b] ? a : b;
}

/**
 * Every membership the groups give: the fleet-wide ADMIN one when a matched rule says ADMIN,
 * and per team the strongest role of the matched rules; nothing for an unmatched group.
 * Groups are compared exactly (case matters, as providers send them). Sorted: ADMIN first,
 * then by team id, so the answer does not depend on the order of groups or rules.
 */
export function membershipsOf(
  groups: readonly string[],
  rules: readonly GroupRule[],
): Membership[] {
  const held = new Set(groups);
  let admin = false;
  const teams = new Map<string, MemberRole>();
  for (const rule of rules) {
    if (!held.has(rule.group)) continue;
    if (rule.role === 'ADMIN' || rule.teamId === null) {
      admin ||= rule.role === 'ADMIN';
      continue;
    }
    const before = teams.get(rule.teamId);
    teams.set(rule.teamId, before === undefined ? rule.role : strongerRole(before, rule.role));
  }
  const memberships: Membership[] = admin ? [{ teamId: null, role: 'ADMIN' }] : [];
  for (const teamId of [...teams.keys()].sort()) {
    memberships.push({ teamId, role: teams.get(teamId)! });
  }
  return memberships;
}

/**
 * The membership a session acts as: the team asked for when the person holds it (null: the
 * fleet-wide ADMIN one), else the strongest (ADMIN when held, then MEMBER before VIEWER, the
 * first in the list's order among equals); undefined when they hold none.
 */
export function activeMembership(
  memberships: readonly Membership[],
  wanted?: string | null,
): Membership | undefined {
  if (wanted !== undefined) {
    const asked = memberships.find((m) => m.teamId === wanted);
    if (asked !== undefined) return asked;
  }
  let best: Membership | undefined;
  for (const m of memberships) {
    if (best === undefined || STRENGTH[m.role] > STRENGTH[best.role]) best = m;
  }
  return best;
}
