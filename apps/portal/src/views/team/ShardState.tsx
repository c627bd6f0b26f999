import type { ShardFieldsFragment } from '@gpushards/graphql-client';
import { queueNote } from '../../logic/shards.js';
import { memoryNote, moveProgress } from '../../logic/elastic.js';

/**
 * A shard's state cell: the state, then what it waits on (the queue), where its GPU memory is
 * and the move under way (elastic memory, docs/elastic.md), why the last move or the shard failed.
 */
export function ShardState({ shard }: { shard: ShardFieldsFragment }) {
  const queue = queueNote(shard);
  const memory = memoryNote(shard.memory);
  const progress = moveProgress(shard.memory);
  return (
    <>
      <span className={`state state-${shard.state}`}>{shard.state}</span>
      {queue !== null && (
        <div className="muted small" data-testid="queue-note" title={shard.queueReason ?? ''}>
          {queue}
        </div>
      )}
      {memory !== null && (
        <div className="muted small" data-testid="memory-note">
          {memory}
        </div>
      )}
      {progress !== null && (
        <progress
          className="move"
          max={100}
          value={progress}
          aria-label={`${shard.name}: ${progress}% of its memory moved`}
        />
      )}
      {shard.memory.lastError && (
        <div className="problem small" data-testid="move-error" title={shard.memory.lastError}>
          last move failed: {shard.memory.lastError}
        </div>
      )}
      {shard.failureReason && <div className="muted small">{shard.failureReason}</div>}
      {shard.exitCode !== null && <div className="muted small">exit {shard.exitCode}</div>}
    </>
  );
}
