// The CLI ships as one file: its own code, @gpushards/limits (a workspace package, not on any
// registry) and its third-party dependencies bundled into dist/main.js, so that
// `npm install -g ./apps/cli`, a packed tarball and `npx gpushards` need nothing to resolve.
import { defineConfig } from 'rolldown';

export default defineConfig({
  input: 'src/main.ts',
  platform: 'node',
  tsconfig: 'tsconfig.json',
  // ws loads these native speed-ups when present and works without them.
  external: ['bufferutil', 'utf-8-validate'],
  output: { file: 'dist/main.js', format: 'esm', codeSplitting: false },
});
