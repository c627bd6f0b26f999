import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { z } from 'zod';

import { readEnvVariables } from './env-variables.js';

const schema = z.object({
  GPUSHARDS_HOST_ID: z.string().regex(/^[a-z]+$/, 'must be lower-case letters'),
  GPUSHARDS_PORT: z
    .string()
    .regex(/^\d+$/, 'must be a whole number')
    .transform(Number)
    .default(4000),
  GPUSHARDS_TOKEN: z.string().min(16, 'must be at least 16 characters').optional(),
});

describe('readEnvVariables', () => {
  it('parses what is set, counts empty values as unset and ignores variables it does not name', () => {
    const read = readEnvVariables(schema, {
      GPUSHARDS_HOST_ID: 'box',
      GPUSHARDS_PORT: '',
      GPUSHARDS_OTHER: 'x',
    });
    assert.deepEqual(read.present, { GPUSHARDS_HOST_ID: 'box' });
    assert.deepEqual(read.values, { GPUSHARDS_HOST_ID: 'box', GPUSHARDS_PORT: 4000 });
    assert.deepEqual(read.problems, []);
  });

  it('names every wrong variable with its value, hides secrets, and says what a required one is', () => {
    const read = readEnvVariables(
      schema,
      { GPUSHARDS_PORT: 'eighty', GPUSHARDS_TOKEN: 'short-secret' },
      {
        secret: new Set(['GPUSHARDS_TOKEN']),
        requiredHint: (name) => `${name.toLowerCase()}: see docs/agent.md`,
      },
    );
    assert.equal(read.values, undefined);
    assert.deepEqual(read.problems.toSorted(), [
      'GPUSHARDS_HOST_ID is required (gpushards_host_id: see docs/agent.md)',
      'GPUSHARDS_PORT must be a whole number, got "eighty"',
      'GPUSHARDS_TOKEN must be at least 16 characters, got (hidden)',
    ]);
    assert.ok(!read.problems.join('\n').includes('short-secret'), 'the secret is not echoed');
  });
});
