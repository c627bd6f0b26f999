import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import type { ObservedMemory } from '@gpushards/limits';

import type { AgentConfig } from '../config/agent-options.js';
import type { AgentLink } from '../link/agent-link.js';
import { createLogger } from '../logging/logger.js';
import type { MemoryService } from '../memory/memory.service.js';
import type { ShardRecord } from '../shards/shard-record.js';
import { ShardRegistry } from '../shards/shard-registry.js';
import type { ShardsService } from '../shards/shards.service.js';
import type { StateReporter } from '../shards/state-reporter.js';
import { ReconcileService } from './reconcile.service.js';

const running = (shardId: string): ShardRecord => ({
  shardId,
  teamId: 'team',
  containerId: `container-${shardId}`,
  state: 'RUNNING',
  observed: 'running',
  gpuUuids: [],
});

/**
 * A reconcile reply is older than any command that arrived after its request was sent: the
 * shards such commands touched are skipped, including those that arrived while the agent was
 * still reading where its shards' memory was (the reply waits for that read).
 */
describe('ReconcileService.apply: the reply and the commands that arrived meanwhile', () => {
  function setUp() {
    const registry = new ShardRegistry({} as StateReporter);
    const removed: string[] = [];
    const shards = {
      list: () => registry.list(),
      commandedSince: (mark: number) => registry.commandedSince(mark),
      delete: (shardId: string) => {
        removed.push(shardId);
        return Promise.resolve({ removed: true });
      },
    } as unknown as ShardsService;
    let memoryRead: (seen: ReadonlyMap<string, ObservedMemory>) => void = () => undefined;
    const memory = {
      observeAll: () => new Promise((resolve) => (memoryRead = resolve)),
    } as unknown as MemoryService;
    const service = new ReconcileService(
      { hostId: 'box-1', stopGraceSeconds: 1 } as AgentConfig,
      {} as AgentLink,
      shards,
      memory,
      createLogger('silent', 'box-1'),
    );
    return { registry, removed, service, memoryRead: (seen = new Map()) => memoryRead(seen) };
  }

  it('keeps a shard launched while the memory was read, and removes one the reply no longer wants', async () => {
    const { registry, removed, service, memoryRead } = setUp();
    registry.set(running('gone'));
    const mark = registry.commandMark();
    const applying = service.apply({ desired: [], stoppedShardIds: [] }, mark);
    // The launch command arrives while apply waits for the memory read.
    registry.noteCommand('fresh');
    registry.set(running('fresh'));
    memoryRead();
    await applying;
    assert.deepEqual(removed, ['gone']);
  });
});
