import assert from 'node:assert/strict';
import { describe, test } from 'node:test';
import fc from 'fast-check';
import {
  activeMembership,
  membershipsOf,
  strongerRole,
  type GroupRule,
  type MemberRole,
} from './memberships.js';

const group: fc.Arbitrary<string> = fc.constantFrom('ml', 'infra', 'ops', 'all', 'ML');
const team = fc.constantFrom('t1', 't2', 't3');
const rule: fc.Arbitrary<GroupRule> = fc.oneof(
  fc.record({ group, teamId: team, role: fc.constantFrom<MemberRole>('MEMBER', 'VIEWER') }),
  fc.record({ group, teamId: fc.constant(null), role: fc.constant<MemberRole>('ADMIN') }),
);
const groups = fc.uniqueArray(group, { maxLength: 5 });
const rules = fc.array(rule, { maxLength: 12 });

describe('memberships from provider groups', () => {
  test('exactly the teams of the matched rules, each once with the strongest role', () => {
    fc.assert(
      fc.property(groups, rules, (held, mapping) => {
        const result = membershipsOf(held, mapping);
        const matched = mapping.filter((r) => held.includes(r.group));
        const teams = result.filter((m) => m.teamId !== null);
        assert.deepEqual(
          teams.map((m) => m.teamId),
          [...new Set(matched.filter((r) => r.teamId !== null).map((r) => r.teamId!))].sort(),
        );
        for (const m of teams) {
          const roles = matched.filter((r) => r.teamId === m.teamId).map((r) => r.role);
          assert.equal(m.role, roles.reduce(strongerRole));
        }
        assert.equal(
          result.some((m) => m.role === 'ADMIN'),
          matched.some((r) => r.role === 'ADMIN'),
        );
      }),
    );
  });

  test('losing a group never adds access; the order of groups and rules does not matter', () => {
    fc.assert(
      fc.property(groups, rules, fc.nat(), (held, mapping, drop) => {
        const all = membershipsOf(held, mapping);
        const fewer = membershipsOf(
          held.filter((_, i) => i !== drop % Math.max(held.length, 1)),
          mapping,
        );
        for (const m of fewer) {
          const before = all.find((a) => a.teamId === m.teamId);
          assert.ok(before !== undefined && strongerRole(before.role, m.role) === before.role);
        }
        assert.deepEqual(membershipsOf([...held].reverse(), [...mapping].reverse()), all);
      }),
    );
  });

  test('groups match exactly; the active membership is the one asked for, else the first', () => {
    const mapping: GroupRule[] = [
      { group: 'ml', teamId: 't1', role: 'MEMBER' },
      { group: 'ops', teamId: null, role: 'ADMIN' },
    ];
    assert.deepEqual(membershipsOf(['ML'], mapping), []);
    const both = membershipsOf(['ml', 'ops'], mapping);
    assert.deepEqual(both, [
      { teamId: null, role: 'ADMIN' },
      { teamId: 't1', role: 'MEMBER' },
    ]);
    assert.deepEqual(activeMembership(both, 't1'), { teamId: 't1', role: 'MEMBER' });
    assert.deepEqual(activeMembership(both, 't9'), { teamId: null, role: 'ADMIN' });
    assert.equal(activeMembership([], 't1'), undefined);
    const teams = membershipsOf(
      ['ml', 'infra'],
      [
        { group: 'infra', teamId: 't0', role: 'VIEWER' },
        { group: 'ml', teamId: 't1', role: 'MEMBER' },
      ],
    );
    assert.deepEqual(activeMembership(teams), { teamId: 't1', role: 'MEMBER' }, 'the strongest');
  });
});
