import { readdirSync, readFileSync, statSync } from 'node:fs';
import { extname, join } from 'node:path';

/** The built portal held in memory: index.html and its hashed assets (a few hundred KiB). */
export interface PortalFiles {
  readonly index: Buffer | undefined;
  readonly assets: ReadonlyMap<string, { readonly body: Buffer; readonly type: string }>;
}

const TYPES: Readonly<Record<string, string>> = {
  '.js': 'text/javascript; charset=utf-8',
  '.css': 'text/css; charset=utf-8',
  '.svg': 'image/svg+xml',
  '.png': 'image/png',
  '.woff2': 'font/woff2',
  '.json': 'application/json',
};

/** Reads dir/index.html and dir/assets/*; a missing folder is a portal that is not built. */
export function loadPortalFiles(dir: string | undefined): PortalFiles {
  const assets = new Map<string, { body: Buffer; type: string }>();
  if (dir === undefined) return { index: undefined, assets };
  let index: Buffer | undefined;
  try {
    index = readFileSync(join(dir, 'index.html'));
  } catch {
    return { index: undefined, assets };
  }
  const assetDir = join(dir, 'assets');
  let names: string[];
  try {
    names = readdirSync(assetDir);
  } catch {
    names = [];
  }
  for (const name of names) {
    const path = join(assetDir, name);
    if (!statSync(path).isFile()) continue;
    assets.set(name, {
      body: readFileSync(path),
      type: TYPES[extname(name)] ?? 'application/octet-stream',
    });
  }
  return { index, assets };
}

/**
 * The portal's own scripts and styles only (Vite bundles everything into assets/); API calls
 * and graphql-ws to this origin; data: images (the CSV download is a data: link).
 */
export const PORTAL_CSP = [
  "default-src 'self'",
  "script-src 'self'",
  "style-src 'self'",
  "img-src 'self' data:",
  "connect-src 'self'",
  "form-action 'none'",
  "frame-ancestors 'none'",
  "base-uri 'none'",
].join('; ');

export const NOT_BUILT_HTML = `<!doctype html>
<html lang="en"><head><meta charset="utf-8"><title>GPU Shards</title></head>
<body style="font-family: system-ui, sans-serif; max-width: 40rem; margin: 3rem auto">
<h1>GPU Shards</h1>
<p>The team portal is not built on this control plane. Build it with
<code>npm run build</code> (it lands in <code>apps/portal/dist</code>) and point
<code>GPUSHARDS_PORTAL_DIR</code> at that folder; <code>npm start</code> does both.</p>
<p>Meanwhile the API answers at <code>POST /graphql</code>, and the
<a href="/explorer">explorer</a> edits queries against it.</p>
</body></html>
`;
