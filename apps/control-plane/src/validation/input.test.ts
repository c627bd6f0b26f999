import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { BadUserInputError } from '../errors/domain-errors.js';
import { checkId, DISPLAY_NAME, InputCheck, TEAM_NAME } from './input.js';

function problemsOf(run: (check: InputCheck) => void): string[] {
  const check = new InputCheck();
  run(check);
  try {
    check.done();
    return [];
  } catch (error) {
    assert.ok(error instanceof BadUserInputError);
    return error.problems.map((p) => p.field);
  }
}

describe('input checks', () => {
  it('team names are DNS-label shaped', () => {
    for (const good of ['ml', 'ml-research', 'a', '7', 'x'.repeat(63)]) {
      assert.deepEqual(
        problemsOf((c) => c.name('name', good, TEAM_NAME)),
        [],
        good,
      );
    }
    for (const bad of ['', '-ml', 'ml-', 'ML', 'm l', 'ml_x', 'x'.repeat(64), "a';--"]) {
      assert.deepEqual(
        problemsOf((c) => c.name('name', bad, TEAM_NAME)),
        ['name'],
        bad,
      );
    }
  });

  it('display names allow people text but no control characters or markup', () => {
    for (const good of ['CI runner', 'Ana (laptop)', 'büro: deploy-bot']) {
      assert.deepEqual(
        problemsOf((c) => c.name('name', good, DISPLAY_NAME)),
        [],
        good,
      );
    }
    for (const bad of ['', ' lead', 'tab\there', 'new\nline', '<b>', 'x'.repeat(101)]) {
      assert.deepEqual(
        problemsOf((c) => c.name('name', bad, DISPLAY_NAME)),
        ['name'],
        bad,
      );
    }
  });

  it('sizes go through libs/limits; every problem is reported at once', () => {
    const fields = problemsOf((c) => {
      assert.equal(c.size('a', '12g'), 12 * 2 ** 30);
      assert.equal(c.size('b', '0', { allowZero: true }), 0);
      c.size('c', '0');
      c.size('d', '12gb');
      c.integer('e', -1, 0, 10);
    });
    assert.deepEqual(fields, ['c', 'd', 'e']);
  });

  it('ids must be UUIDs before they reach a uuid column', () => {
    assert.equal(
      checkId('id', 'A0EEBC99-9C0B-4EF8-BB6D-6BB9BD380A11'),
      'a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a11',
    );
    assert.throws(() => checkId('id', "1' OR '1'='1"), BadUserInputError);
  });
});
