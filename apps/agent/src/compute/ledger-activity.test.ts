import assert from 'node:assert/strict';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, describe, it } from 'node:test';

import {
  decodeLedger,
  LEDGER_HEADER_SIZE,
  LEDGER_MAGIC,
  LEDGER_MEMBER_FIELDS,
  LEDGER_MEMBER_SIZE,
  LEDGER_MEMBERS,
  LEDGER_SIZE,
  LEDGER_VERSION,
  LedgerActivity,
} from './ledger-activity.js';

const GPU = 'GPU-fa4e5000-0000-4000-8000-000000000000';
const work = mkdtempSync(join(tmpdir(), 'gpushards-ledger-'));
after(() => rmSync(work, { recursive: true, force: true }));

function ledger(members: { shard: string; share: number; busy: bigint; last: bigint }[]): Buffer {
  const b = Buffer.alloc(LEDGER_SIZE);
  b.writeBigUInt64LE(LEDGER_MAGIC, 0);
  b.writeUInt32LE(LEDGER_VERSION, 8);
  b.writeUInt32LE(LEDGER_MEMBERS, 12);
  b.writeBigUInt64LE(BigInt(LEDGER_SIZE), 16);
  members.forEach((m, i) => {
    const base = LEDGER_HEADER_SIZE + i * LEDGER_MEMBER_SIZE;
    b.write(m.shard, base, 'utf8');
    b.writeUInt32LE(m.share, base + LEDGER_MEMBER_FIELDS.share_permille.offset);
    b.writeBigUInt64LE(m.busy, base + LEDGER_MEMBER_FIELDS.busy_ns.offset);
    b.writeBigUInt64LE(m.last, base + LEDGER_MEMBER_FIELDS.last_kernel_ns.offset);
  });
  return b;
}

describe('compute ledger activity', () => {
  it('decodes members and refuses what is not a ledger', () => {
    const members = decodeLedger(ledger([{ shard: 's1', share: 250, busy: 5n, last: 7n }]));
    assert.deepEqual(members, [
      { shardId: 's1', sharePermille: 250, busyNs: 5n, lastKernelNs: 7n },
    ]);
    assert.deepEqual(decodeLedger(Buffer.alloc(LEDGER_SIZE)), []);
    assert.deepEqual(decodeLedger(Buffer.alloc(10)), []);
  });

  it('turns busy time into a ratio between samples (the last launch is not taken from here)', async () => {
    const dir = join(work, 'ledger');
    let now = 10_000_000_000n;
    const reader = new LedgerActivity(dir, () => now);
    assert.equal((await reader.sample()).size, 0, 'no folder: no activity');
    const { mkdirSync } = await import('node:fs');
    mkdirSync(dir);
    writeFileSync(
      join(dir, GPU),
      ledger([
        { shard: 'a', share: 250, busy: 1_000_000_000n, last: 9_000_000_000n },
        { shard: 'b', share: 0, busy: 0n, last: 0n },
      ]),
    );
    writeFileSync(join(dir, `${GPU}.tmp.12`), 'half-written');
    const first = await reader.sample();
    assert.deepEqual(first.get('a'), [{ gpuUuid: GPU.toLowerCase() }]);
    assert.deepEqual(first.get('b'), [{ gpuUuid: GPU.toLowerCase() }]);
    now += 2_000_000_000n;
    writeFileSync(
      join(dir, GPU),
      ledger([
        { shard: 'a', share: 250, busy: 1_500_000_000n, last: 11_500_000_000n },
        { shard: 'b', share: 0, busy: 0n, last: 0n },
      ]),
    );
    const second = await reader.sample();
    assert.deepEqual(second.get('a'), [{ gpuUuid: GPU.toLowerCase(), busyRatio: 0.25 }]);
    assert.deepEqual(second.get('b'), [{ gpuUuid: GPU.toLowerCase(), busyRatio: 0 }]);
  });
});
