#!/usr/bin/env node
// The README's test command. Builds everything, then runs each test tier and prints one
// summary line per tier plus a closing `N passed, N failed` line. A tier that fails, or that
// runs no test at all, fails the whole run: a tier that cannot run must never pass silently.
import { spawn } from 'node:child_process';
import { existsSync, readdirSync } from 'node:fs';
import { join } from 'node:path';
import { countResults, failureLines } from './test-output.mjs';

/** The `*.test.mjs` files of some folders: Node 20's runner, given a folder, also runs its helpers. */
const testFiles = (...folders) =>
  folders.flatMap((folder) =>
    readdirSync(folder)
      .filter((name) => name.endsWith('.test.mjs'))
      .sort()
      .map((name) => join(folder, name)),
  );

const nx = (args) => ['npx', ['nx', ...args, '--output-style=stream']];

/** Each tier is a command whose output carries its own pass/fail counts. */
const tiers = [
  { name: 'limits', command: nx(['run', 'limits:test', '--excludeTaskDependencies']) },
  {
    name: 'protocol',
    command: nx(['run-many', '-t', 'test', '-p', 'protocol,link', '--excludeTaskDependencies']),
  },
  {
    name: 'control-plane',
    command: nx(['run', 'control-plane:test', '--excludeTaskDependencies']),
  },
  { name: 'agent', command: nx(['run', 'agent:test', '--excludeTaskDependencies']) },
  // The team portal's logic (Vitest), then the portal in Chromium and the gpushards CLI as
  // processes, against one real control plane (PGlite, simulated GPUs, Docker); then gpushards
  // packed and installed offline into a temporary npm prefix.
  {
    name: 'portal',
    command: nx(['run-many', '-t', 'test', '-p', 'portal,cli', '--excludeTaskDependencies']),
  },
  {
    name: 'integration',
    command: nx(['run', 'integration-tests:test', '--excludeTaskDependencies']),
  },
  { name: 'native', command: ['bash', ['native/run-tests.sh']], requires: 'native/run-tests.sh' },
  // Three agents, two control planes, NATS, PostgreSQL and Docker as processes, with faults.
  { name: 'e2e', command: nx(['run', 'e2e:test', '--excludeTaskDependencies']) },
  // `npm start` end to end (simulated GPUs, real Docker) and the deployment files.
  {
    name: 'one-box',
    command: [
      'node',
      ['--test', '--test-concurrency=1', ...testFiles('scripts/one-box', 'deploy')],
    ],
  },
  // Uses what the native tier built: the interposer and fakes inside a real Docker container.
  { name: 'docker', command: ['node', ['native/docker-tests/run.mjs', 'native/build']] },
];

const wanted = new Set(process.argv.slice(2));
const env = { ...process.env, NX_DAEMON: 'false', NX_NO_CLOUD: 'true', FORCE_COLOR: '0' };

function run(command, args, { quiet = false } = {}) {
  return new Promise((resolve) => {
    const child = spawn(command, args, { env, stdio: ['ignore', 'pipe', 'pipe'] });
    let output = '';
    const collect = (stream, sink) =>
      stream.on('data', (chunk) => {
        output += chunk;
        if (!quiet) sink.write(chunk);
      });
    collect(child.stdout, process.stdout);
    collect(child.stderr, process.stderr);
    child.on('close', (code, signal) => resolve({ code: code ?? 128, signal, output }));
  });
}

async function main() {
  const selected = tiers.filter((tier) => wanted.size === 0 || wanted.has(tier.name));
  if (selected.length === 0) {
    console.error(
      `unknown tier(s): ${[...wanted].join(', ')}; known: ${tiers.map((t) => t.name).join(', ')}`,
    );
    process.exit(2);
  }

  console.log('== build ==');
  const build = await run(...nx(['run-many', '-t', 'build']));
  if (build.code !== 0) {
    console.error('build failed: no tier was run');
    console.log('0 passed, 1 failed');
    process.exit(1);
  }

  const summaries = [];
  for (const tier of selected) {
    console.log(`\n== tier ${tier.name} ==`);
    if (tier.requires && !existsSync(tier.requires)) {
      summaries.push({
        tier: tier.name,
        passed: 0,
        failed: 1,
        note: `${tier.requires} is missing`,
      });
      continue;
    }
    const started = Date.now();
    const result = await run(...tier.command);
    const counts = countResults(result.output);
    const seconds = ((Date.now() - started) / 1000).toFixed(1);
    let note = `${seconds}s`;
    if (result.code !== 0 && counts.failed === 0) {
      counts.failed = 1;
      note += `, exited with ${result.signal ?? result.code}`;
    }
    if (counts.passed + counts.failed === 0) {
      counts.failed = 1;
      note += ', ran no test';
    }
    summaries.push({ tier: tier.name, ...counts, note, failures: failureLines(result.output) });
  }

  console.log('\n== summary ==');
  for (const s of summaries) {
    const verdict = s.failed === 0 ? 'ok  ' : 'FAIL';
    console.log(
      `${verdict} ${s.tier.padEnd(14)} ${s.passed} passed, ${s.failed} failed (${s.note})`,
    );
  }
  for (const s of summaries.filter((s) => s.failed > 0 && s.failures?.length > 0)) {
    console.log(`\n${s.tier}, what failed:\n${s.failures.map((line) => `  ${line}`).join('\n')}`);
  }
  const passed = summaries.reduce((n, s) => n + s.passed, 0);
  const failed = summaries.reduce((n, s) => n + s.failed, 0);
  console.log(`${passed} passed, ${failed} failed`);
  process.exit(failed === 0 ? 0 : 1);
}

await main();
