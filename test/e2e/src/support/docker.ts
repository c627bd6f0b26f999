import { spawnSync } from 'node:child_process';

export function docker(...args: string[]): string {
  const result = spawnSync('docker', args, { encoding: 'utf8', maxBuffer: 64 * 1024 * 1024 });
  if (result.status !== 0) {
    throw new Error(`docker ${args.join(' ')} failed: ${(result.stderr ?? '').trim()}`);
  }
  return result.stdout.trim();
}

export interface ShardContainer {
  readonly id: string;
  readonly name: string;
  readonly shardId: string;
  readonly hostId: string;
  /** running, exited, created, ... */
  readonly state: string;
  readonly managed: boolean;
}

/**
 * Shard containers of the given hosts (label io.gpushards.host), as `docker ps -a` lists
 * them: only this run's, since every host id carries the run's prefix.
 */
export function shardContainers(hostIds: readonly string[]): ShardContainer[] {
  const containers: ShardContainer[] = [];
  for (const hostId of hostIds) {
    const out = docker(
      'ps',
      '-a',
      '--no-trunc',
      '--filter',
      `label=io.gpushards.host=${hostId}`,
      '--format',
      '{{.ID}}\t{{.Names}}\t{{.Label "io.gpushards.shard"}}\t{{.State}}\t{{.Label "io.gpushards.managed"}}',
    );
    if (out === '') continue;
    for (const line of out.split('\n')) {
      const [id = '', name = '', shardId = '', state = '', managed = ''] = line.split('\t');
      containers.push({ id, name, shardId, hostId, state, managed: managed === 'true' });
    }
  }
  return containers;
}

/** Removes this run's containers (managed and of its hosts) and image; never throws. */
export function removeRunContainers(hostIds: readonly string[], image: string): void {
  for (const hostId of hostIds) {
    const ids = spawnSync(
      'docker',
      [
        'ps',
        '-aq',
        '--filter',
        'label=io.gpushards.managed=true',
        '--filter',
        `label=io.gpushards.host=${hostId}`,
      ],
      { encoding: 'utf8' },
    )
      .stdout.split('\n')
      .filter((id) => id !== '');
    if (ids.length > 0) spawnSync('docker', ['rm', '-f', ...ids], { stdio: 'ignore' });
  }
  spawnSync('docker', ['rmi', '-f', image], { stdio: 'ignore' });
}
