import assert from 'node:assert/strict';
import { mkdtempSync, rmSync, statSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, describe, it } from 'node:test';

import { pino } from 'pino';

import type { AgentConfig } from '../config/agent-options.js';
import { buildRegion } from '../testing/region-fixture.js';
import { readRegion } from './region-file.js';
import { RegionWatchService } from './region-watch.service.js';
import { BelowUsageError, RegionsService } from './regions.service.js';

const GPU = 'GPU-fa4e5000-0000-4000-8000-000000000000';
const GiB = 1024 ** 3;
const root = mkdtempSync(join(tmpdir(), 'gpushards-regions-'));
after(() => rmSync(root, { recursive: true, force: true }));

const config = { regionRoot: join(root, 'regions') } as AgentConfig;
const watch = new RegionWatchService(config, pino({ level: 'silent' }));
after(() => watch.onModuleDestroy());
const service = new RegionsService(config, watch, pino({ level: 'silent' }));

describe('RegionsService', () => {
  it('prepares a folder any container user can write, watched for its bells, and removes it', async () => {
    const folder = await service.prepare('s1');
    assert.equal(statSync(folder).mode & 0o777, 0o777);
    assert.ok(watch.watching('s1'));
    assert.deepEqual(await service.devices('s1'), [], 'no region yet: no GPU used');
    await service.remove('s1');
    assert.throws(() => statSync(folder), /ENOENT/);
    assert.equal(watch.watching('s1'), false);
  });

  it('keeps a limit for a GPU the region does not list yet, and writes it once it does', async () => {
    await service.prepare('s2');
    await service.setLimits('s2', [{ uuid: GPU, limitBytes: 3 * GiB }], true);
    writeFileSync(service.file('s2'), buildRegion([{ uuid: GPU, limitBytes: GiB, usedBytes: 5 }]));
    await service.applyPendingLimits();
    assert.equal((await readRegion(service.file('s2'))).devices[0]?.limitBytes, 3 * GiB);
    await assert.rejects(
      service.setLimits('s2', [{ uuid: GPU, limitBytes: 4 }], true),
      BelowUsageError,
    );
    await service.setLimits('s2', [{ uuid: GPU, limitBytes: 4 }], false);
    assert.equal((await readRegion(service.file('s2'))).devices[0]?.limitBytes, 4);
  });
});
