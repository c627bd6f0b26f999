import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';

/** The repository root: scripts/one-box/../.. */
export const REPO_ROOT = join(dirname(fileURLToPath(import.meta.url)), '..', '..');
