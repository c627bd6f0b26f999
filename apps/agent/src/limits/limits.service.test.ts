import assert from 'node:assert/strict';
import { mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, describe, it } from 'node:test';

import type { AgentConfig } from '../config/agent-options.js';
import { createLogger } from '../logging/logger.js';
import type { ComputeTurns } from './limits-file.js';
import { LIMITS_HEADER_FIELDS } from './limits-layout.js';
import { LimitsService } from './limits.service.js';

const GPU0 = 'GPU-fa4e5000-0000-4000-8000-000000000000';
const work = mkdtempSync(join(tmpdir(), 'gpushards-limits-service-'));
after(() => rmSync(work, { recursive: true, force: true }));

describe('LimitsService', () => {
  it("writes the host's compute turns into every shard's limits file", async () => {
    const turnsWritten = async (computeTurns: ComputeTurns) => {
      const config = { stateDir: join(work, computeTurns), computeTurns } as AgentConfig;
      const limits = new LimitsService(config, createLogger('silent', 'box-1'));
      const path = await limits.prepare('s1', [{ uuid: GPU0, limitBytes: 1000 }], 0, 'kill');
      await limits.onModuleDestroy();
      return readFileSync(path).readUInt32LE(LIMITS_HEADER_FIELDS.compute_turns.offset);
    };
    assert.equal(await turnsWritten('cpu'), 1);
    assert.equal(await turnsWritten('gpu'), 2);
  });
});
