import assert from 'node:assert/strict';
import { mkdirSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, before, describe, it } from 'node:test';
import { createControlPlane, type ControlPlane } from '../control-plane.js';

describe('the portal at /', () => {
  let dir: string;
  let cp: ControlPlane;
  before(async () => {
    dir = mkdtempSync(join(tmpdir(), 'gpushards-portal-'));
    const portal = join(dir, 'portal');
    mkdirSync(join(portal, 'assets'), { recursive: true });
    writeFileSync(
      join(portal, 'index.html'),
      '<!doctype html><script src="/assets/app-1.js"></script>',
    );
    writeFileSync(join(portal, 'assets', 'app-1.js'), 'console.log(1)');
    cp = await createControlPlane({
      dataDir: join(dir, 'data'),
      port: 0,
      portalDir: portal,
      logLevel: 'error',
      operatorOutput: { write: () => true } as unknown as NodeJS.WritableStream,
    });
  });
  after(async () => {
    await cp?.close();
    rmSync(dir, { recursive: true, force: true });
  });

  it('serves index.html with a CSP that allows only its own origin', async () => {
    const response = await fetch(`${cp.url}/`);
    assert.equal(response.status, 200);
    assert.match(response.headers.get('content-type') ?? '', /^text\/html/);
    const csp = response.headers.get('content-security-policy') ?? '';
    assert.match(csp, /script-src 'self'/);
    assert.doesNotMatch(csp, /https?:|\*/);
    assert.match(await response.text(), /assets\/app-1\.js/);
  });

  it('serves its hashed assets with their type, and 404s others', async () => {
    const js = await fetch(`${cp.url}/assets/app-1.js`);
    assert.equal(js.status, 200);
    assert.match(js.headers.get('content-type') ?? '', /^text\/javascript/);
    assert.equal(await js.text(), 'console.log(1)');
    assert.equal((await fetch(`${cp.url}/assets/nope.js`)).status, 404);
    assert.equal((await fetch(`${cp.url}/assets/..%2Findex.html`)).status, 404);
  });
});
