/**
 * Folds Docker's pull stream (one JSON object per layer update) into one figure for the
 * PULLING state event: bytes downloaded over bytes to download, once every layer's size is
 * known.
 */
export interface PullProgress {
  readonly completedBytes: number;
  /** Absent until every layer announced its size. */
  readonly totalBytes?: number;
}

export interface PullEvent {
  status?: string;
  id?: string;
  progressDetail?: { current?: number; total?: number };
  error?: string;
  errorDetail?: { message?: string };
}

interface LayerProgress {
  current: number;
  total?: number;
  done: boolean;
}

const DOWNLOAD_DONE = new Set([
  'Download complete',
  'Pull complete',
  'Already exists',
  'Verifying Checksum',
  'Extracting',
]);

export class PullProgressTracker {
  private readonly layers = new Map<string, LayerProgress>();

  /** Takes one event; returns the error text if the event reports a failure. */
  apply(event: PullEvent): string | undefined {
    if (event.error !== undefined || event.errorDetail?.message !== undefined) {
      return event.errorDetail?.message ?? event.error;
    }
    const { id, status } = event;
    if (id === undefined || status === undefined || !/^[0-9a-f]{12,64}$/.test(id)) return undefined;
    const layer = this.layers.get(id) ?? { current: 0, done: false };
    this.layers.set(id, layer);
    if (status === 'Downloading') {
      const { current, total } = event.progressDetail ?? {};
      if (typeof current === 'number' && current >= 0) layer.current = current;
      if (typeof total === 'number' && total > 0) layer.total = total;
    } else if (DOWNLOAD_DONE.has(status)) {
      layer.done = true;
      if (layer.total !== undefined) layer.current = layer.total;
    }
    return undefined;
  }

  progress(): PullProgress {
    let completedBytes = 0;
    let totalBytes = 0;
    let allKnown = this.layers.size > 0;
    for (const layer of this.layers.values()) {
      completedBytes += layer.current;
      if (layer.total !== undefined) totalBytes += layer.total;
      else if (!layer.done) allKnown = false;
    }
    return allKnown
      ? { completedBytes, totalBytes: Math.max(totalBytes, completedBytes) }
      : { completedBytes };
  }
}
