import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';

import { freePort, startBackground } from './processes.js';

export interface TestRegistry {
  /** host:port, for image references like `${address}/team/image:tag`. */
  readonly address: string;
  stop(): Promise<void>;
}

/**
 * A real Docker registry (Debian's docker-registry package) on a free localhost port;
 * Docker treats localhost registries as insecure, so plain HTTP works.
 */
export async function startRegistry(): Promise<TestRegistry> {
  const dir = mkdtempSync(join(tmpdir(), 'gpushards-registry-'));
  const port = await freePort();
  const config = join(dir, 'config.yml');
  writeFileSync(
    config,
    [
      'version: 0.1',
      'log:',
      '  level: info',
      'storage:',
      '  filesystem:',
      `    rootdirectory: ${join(dir, 'data')}`,
      'http:',
      `  addr: 127.0.0.1:${port}`,
      '',
    ].join('\n'),
  );
  let server;
  try {
    server = await startBackground('docker-registry', ['serve', config], /listening on/i);
  } catch (error) {
    rmSync(dir, { recursive: true, force: true });
    throw new Error(
      `${(error as Error).message}\nthe pull test needs a local registry: apt-get install docker-registry`,
      { cause: error },
    );
  }
  return {
    address: `127.0.0.1:${port}`,
    stop: async () => {
      await server.stop();
      rmSync(dir, { recursive: true, force: true });
    },
  };
}
