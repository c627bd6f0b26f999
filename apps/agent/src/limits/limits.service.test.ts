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
  it("writes the fence's worst case into every shard's limits file, resident; marks where the memory is in place", async () => {
    const config = {
      stateDir: join(work, 'memory'),
      computeTurns: 'gpu',
      enforcement: { intervalMs: 80 },
    } as AgentConfig;
    const limits = new LimitsService(config, createLogger('silent', 'box-1'));
    const path = await limits.prepare('s1', [{ uuid: GPU0, limitBytes: 1000 }], 0, 'kill');
    const header = () => readFileSync(path);
    assert.equal(header().readUInt32LE(LIMITS_HEADER_FIELDS.pressure_wait_ms.offset), 80 + 250);
    assert.equal(header().readUInt32LE(LIMITS_HEADER_FIELDS.memory_state.offset), 0);
    assert.equal(await limits.memory('s1'), 'resident');
    await limits.setMemory('s1', 'suspended');
    assert.equal(header().readUInt32LE(LIMITS_HEADER_FIELDS.memory_state.offset), 1);
    assert.equal(await limits.memory('s1'), 'suspended');
    assert.equal(await limits.capsTotal('s1'), 1000);
    await limits.onModuleDestroy();
    // A shard the agent adopted after a restart (no entry yet) is marked through its file.
    const adopted = new LimitsService(config, createLogger('silent', 'box-1'));
    assert.equal(await adopted.memory('s1'), 'suspended');
    await adopted.setMemory('s1', 'resident');
    assert.equal(await adopted.memory('s1'), 'resident');
    assert.equal(await adopted.capsTotal('s1'), 1000);
    assert.equal(await adopted.memory('never'), 'resident', 'no file: resident');
    await assert.rejects(adopted.setMemory('never', 'suspended'), /ENOENT/);
    await adopted.onModuleDestroy();
  });

  it("writes the host's compute turns into every shard's limits file", async () => {
    const turnsWritten = async (computeTurns: ComputeTurns) => {
      const config = {
        stateDir: join(work, computeTurns),
        computeTurns,
        enforcement: { intervalMs: 50 },
      } as AgentConfig;
      const limits = new LimitsService(config, createLogger('silent', 'box-1'));
      const path = await limits.prepare('s1', [{ uuid: GPU0, limitBytes: 1000 }], 0, 'kill');
      await limits.onModuleDestroy();
      return readFileSync(path).readUInt32LE(LIMITS_HEADER_FIELDS.compute_turns.offset);
    };
    assert.equal(await turnsWritten('cpu'), 1);
    assert.equal(await turnsWritten('gpu'), 2);
  });
});
