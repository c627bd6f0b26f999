import { mkdirSync, readFileSync, renameSync, rmSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';

/**
 * What each process of a shard's container held on the GPU when a suspend moved it, kept in the
 * agent's state folder (`<stateDir>/memory/<shardId>.json`): the driver does not say how much a
 * checkpointed process holds and NVML no longer lists it, so without this an agent started after
 * a crash could not tell what a suspended shard holds in host RAM, nor a resume's progress and
 * bytes. Written before the first checkpoint of a move (a crash after it finds it), removed once
 * the memory is back. Tied to one container: another container of the shard reads nothing.
 */
export class SuspendedBytesStore {
  constructor(private readonly dir: string) {}

  /** The bytes by host PID, or undefined when none were kept for this container. */
  read(shardId: string, containerId: string): Map<number, number> | undefined {
    let text: string;
    try {
      text = readFileSync(this.path(shardId), 'utf8');
    } catch {
      return undefined;
    }
    try {
      const kept = JSON.parse(text) as { containerId?: unknown; bytesByPid?: unknown };
      if (kept.containerId !== containerId || typeof kept.bytesByPid !== 'object') {
        return undefined;
      }
      const bytes = new Map<number, number>();
      for (const [pid, value] of Object.entries(kept.bytesByPid ?? {})) {
        if (/^\d+$/.test(pid) && Number.isSafeInteger(value) && (value as number) >= 0) {
          bytes.set(Number(pid), value as number);
        }
      }
      return bytes;
    } catch {
      return undefined; // a torn or foreign file: nothing known
    }
  }

  /** Replaces what is kept for the shard (a new file renamed over the old: never half written). */
  write(shardId: string, containerId: string, bytes: ReadonlyMap<number, number>): void {
    mkdirSync(this.dir, { recursive: true, mode: 0o700 });
    const path = this.path(shardId);
    writeFileSync(
      `${path}.tmp`,
      JSON.stringify({ containerId, bytesByPid: Object.fromEntries(bytes) }),
      { mode: 0o600 },
    );
    renameSync(`${path}.tmp`, path);
  }

  remove(shardId: string): void {
    rmSync(this.path(shardId), { force: true });
  }

  private path(shardId: string): string {
    return join(this.dir, `${shardId}.json`);
  }
}
