import { fileURLToPath } from 'node:url';

/** The monorepo's root, from apps/agent/dist/testing (compiled) or apps/agent/src/testing. */
export const REPO_ROOT = fileURLToPath(new URL('../../../../', import.meta.url));
