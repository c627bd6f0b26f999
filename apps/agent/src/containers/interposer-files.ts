import { existsSync, mkdirSync, readFileSync, statSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';

import { Inject, Injectable } from '@nestjs/common';

import { AGENT_CONFIG, type AgentConfig } from '../config/agent-options.js';
import { CONTAINER_PATHS } from './container-spec.js';

/**
 * The two host files every shard mounts read-only: libvgpu.so, and an ld.so.preload that
 * names it, so the loader puts the interposer into every process of the container with no
 * LD_PRELOAD for the shard to unset. Checked and written once, at start.
 */
@Injectable()
export class InterposerFiles {
  readonly interposerPath: string;
  readonly preloadFile: string;

  constructor(@Inject(AGENT_CONFIG) config: AgentConfig) {
    this.interposerPath = config.interposerPath;
    if (!existsSync(this.interposerPath) || !statSync(this.interposerPath).isFile()) {
      throw new Error(
        `the interposer ${this.interposerPath} is missing: build native/ (cmake -S native -B native/build && ` +
          'cmake --build native/build) or set GPUSHARDS_INTERPOSER_PATH to libvgpu.so',
      );
    }
    mkdirSync(config.stateDir, { recursive: true, mode: 0o755 });
    this.preloadFile = join(config.stateDir, 'ld.so.preload');
    const content = `${CONTAINER_PATHS.interposer}\n`;
    if (!existsSync(this.preloadFile) || readFileSync(this.preloadFile, 'utf8') !== content) {
      writeFileSync(this.preloadFile, content, { mode: 0o644 });
    }
  }
}
