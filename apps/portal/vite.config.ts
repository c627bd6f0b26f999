import react from '@vitejs/plugin-react';
import { defineConfig } from 'vitest/config';

// Everything is bundled into dist/ (no CDN, no web fonts): the portal works with no internet.
export default defineConfig({
  plugins: [react()],
  // One React: urql resolves react from the root node_modules, the portal from its own.
  resolve: { dedupe: ['react', 'react-dom'] },
  base: '/',
  build: { outDir: 'dist', assetsDir: 'assets', sourcemap: false, chunkSizeWarningLimit: 1024 },
  test: { environment: 'jsdom', include: ['src/**/*.test.{ts,tsx}'] },
});
