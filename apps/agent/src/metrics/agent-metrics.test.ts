import assert from 'node:assert/strict';
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { describe, it } from 'node:test';

import type { AgentConfig } from '../config/agent-options.js';
import { createLogger } from '../logging/logger.js';
import { REPO_ROOT } from '../testing/paths.js';
import { AgentMetrics } from './agent-metrics.js';
import { MetricsHttpServer } from './metrics-http.js';

describe("the agent's metrics", () => {
  it('docs/metrics.md names every one, and no other agent metric', async () => {
    const metrics = new AgentMetrics();
    const names = (await metrics.registry.getMetricsAsJSON()).map((metric) => metric.name).sort();
    const section = readFileSync(join(REPO_ROOT, 'docs/metrics.md'), 'utf8')
      .split('## The agent')[1]!
      .split('\n## ')[0]!;
    const documented = [...section.matchAll(/^\| `(gpushards_agent_[a-z_]+)` \|/gm)]
      .map((match) => match[1])
      .sort();
    assert.deepEqual(documented, names);
  });

  it('serves them on GET /metrics where it is told to listen, nothing else', async () => {
    const metrics = new AgentMetrics();
    metrics.wakes.inc();
    const server = new MetricsHttpServer(
      { metricsListen: { host: '127.0.0.1', port: 0 } } as AgentConfig,
      metrics,
      createLogger('silent', 'metrics-test'),
    );
    await server.onApplicationBootstrap();
    try {
      const { host, port } = server.address()!;
      const response = await fetch(`http://${host}:${port}/metrics`);
      assert.equal(response.status, 200);
      assert.match(response.headers.get('content-type') ?? '', /^text\/plain/);
      assert.match(await response.text(), /^gpushards_agent_wake_messages_total 1$/m);
      assert.equal((await fetch(`http://${host}:${port}/`)).status, 404);
      assert.equal((await fetch(`http://${host}:${port}/metrics`, { method: 'POST' })).status, 404);
    } finally {
      await server.onModuleDestroy();
    }
    const quiet = new MetricsHttpServer({} as AgentConfig, metrics, createLogger('silent', 'x'));
    await quiet.onApplicationBootstrap();
    assert.equal(quiet.address(), undefined, 'not served unless asked');
  });
});
