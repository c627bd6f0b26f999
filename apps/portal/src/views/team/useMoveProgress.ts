import { useEffect, useState } from 'react';
import { useClient } from 'urql';
import { ShardMemoryDocument, type ResultOf } from '@gpushards/graphql-client';
import { isMoving } from '../../logic/elastic.js';

type MemoryRead = NonNullable<ResultOf<typeof ShardMemoryDocument>['shard']>;

/** How often a moving shard's progress is read again. */
const MOVE_POLL_MS = 1_000;

/**
 * The progress of the moves under way (elastic memory, docs/elastic.md), by shard id. The
 * control plane stores each progress report of the host but publishes it as no shard event (it
 * changes neither the state nor the version), so while shards are SUSPENDING or RESUMING each is
 * read again every second; the state events still say when a move ends. Apply a read with
 * logic/elastic's withProgress, which keeps it to the version it was read for.
 */
export function useMoveProgress(
  rows: readonly { id: string; state: string }[],
): ReadonlyMap<string, MemoryRead> {
  const client = useClient();
  const [reads, setReads] = useState<ReadonlyMap<string, MemoryRead>>(new Map());
  const moving = rows
    .filter((row) => isMoving(row.state))
    .map((row) => row.id)
    .sort()
    .join(',');
  useEffect(() => {
    if (moving === '') return;
    let stopped = false;
    const readAll = () =>
      void Promise.all(
        moving
          .split(',')
          .map((id) =>
            client
              .query(ShardMemoryDocument, { id }, { requestPolicy: 'network-only' })
              .toPromise(),
          ),
      ).then((results) => {
        if (stopped) return;
        const next = new Map<string, MemoryRead>();
        for (const result of results)
          if (result.data?.shard) next.set(result.data.shard.id, result.data.shard);
        setReads(next);
      });
    readAll();
    const timer = setInterval(readAll, MOVE_POLL_MS);
    return () => {
      stopped = true;
      clearInterval(timer);
    };
  }, [client, moving]);
  return reads;
}
