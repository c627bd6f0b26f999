#!/usr/bin/env node
// The README's first command, `npm start`: the whole system on this machine in one process.
// The control plane (embedded PGlite in the data folder unless DATABASE_URL is set) and an
// in-process agent for this host, linked directly (no NATS). Builds what is missing first,
// uses the local Docker engine and NVIDIA driver when they are there, and simulates GPUs with
// the fake NVIDIA libraries when there is no driver. docs/operations.md, "The one box".
import { mkdirSync, readFileSync } from 'node:fs';
import { createServer } from 'node:net';
import { join, relative } from 'node:path';

import { ensureBuilt, FAKE_DRIVER_DIR, INTERPOSER_PATH } from './one-box/build.mjs';
import { DEFAULT_SIMULATED_GPUS, findDocker, findNvml, hostIdFor } from './one-box/environment.mjs';
import { createLogSink } from './one-box/log-sink.mjs';
import { REPO_ROOT } from './one-box/paths.mjs';

const LOG_FILE = 'gpushards.log';
const PORTAL_DIR = join(REPO_ROOT, 'apps/portal/dist');
const AGENT_STATE_SUBDIR = 'agent';
// The host's compute ledger (docs/compute.md): shards take turns on each GPU by their compute
// share. GPUSHARDS_COMPUTE_LEDGER_DIR puts it elsewhere (the agent's own variable).
const LEDGER_SUBDIR = 'ledger';

const say = (line = '') => process.stdout.write(`${line}\n`);
const step = (line) => say(`gpushards: ${line}`);

/** A start-up problem with a message written for the person at the terminal. */
class StartError extends Error {}

/** Paths under the working folder are shown relative to it, others absolute. */
function shown(path) {
  const rel = relative(process.cwd(), path);
  return rel.startsWith('..') || rel === '' ? path : rel;
}

/** Info lines worth seeing live besides warnings and errors; the log file has every line. */
const TERMINAL_MESSAGES = new Set([
  'host registered',
  'adopted a shard container',
  'shard deleted',
]);
function terminalInfo(record) {
  return record.module === 'state' || TERMINAL_MESSAGES.has(record.msg);
}

async function main() {
  try {
    await ensureBuilt({ say: step });
  } catch (error) {
    throw new StartError(
      `${error.message.split('\n')[0]}\n(the build's output is above; \`npm run build\` runs it again)`,
    );
  }

  const controlPlaneApi = await import('@gpushards/control-plane');
  const agentApi = await import('@gpushards/agent');
  const { formatSize } = await import('@gpushards/limits');
  const { default: Docker } = await import('dockerode');
  const { default: koffi } = await import('koffi');

  let config;
  try {
    config = controlPlaneApi.loadConfigFromEnv();
  } catch (error) {
    if (error instanceof controlPlaneApi.ConfigError) throw new StartError(error.message);
    throw error;
  }
  // The agent's own variables that the one box passes on (docs/operations.md): how much host RAM
  // suspended shards may take (elastic memory; 50% of it by default) and where shards wait for
  // their compute turns. Read by the agent's reader, so they mean and are checked as on a fleet.
  const tunables = agentTunables(agentApi);
  // Before anything is made: a taken port must not leave a new data folder and admin token.
  await assertPortFree(config.host, config.port);
  if (!config.database.url) assertDatabaseFree(config.database.embeddedDataDir);
  mkdirSync(config.dataDir, { recursive: true });
  const logLevel = process.env.GPUSHARDS_LOG_LEVEL || 'info';
  const logPath = join(config.dataDir, LOG_FILE);
  const sink = createLogSink(logPath, { show: terminalInfo });

  // What is there: Docker decides whether an agent can run; NVML whether GPUs are real.
  const docker = await findDocker(Docker);
  const simulateSpec = process.env.GPUSHARDS_SIMULATE_GPUS || undefined;
  const nvmlLibrary = process.env.GPUSHARDS_NVML_LIBRARY || 'libnvidia-ml.so.1';
  const nvml = simulateSpec ? undefined : findNvml(koffi, nvmlLibrary);
  const simulated = simulateSpec !== undefined || !nvml.found;
  let gpuSource;
  if (simulated) {
    let gpus;
    try {
      gpus = agentApi.parseSimulatedGpus(simulateSpec ?? DEFAULT_SIMULATED_GPUS);
    } catch (error) {
      throw new StartError(`GPUSHARDS_SIMULATE_GPUS: ${error.message}`);
    }
    gpuSource = { kind: 'simulated', gpus, fakeLibraryDir: FAKE_DRIVER_DIR };
  } else {
    gpuSource = { kind: 'nvml', nvmlLibrary };
  }

  step('starting the control plane');
  // Control plane and agent talk through this hub exactly as over NATS (every message encoded
  // and validated), with no broker. The agent retries on its own LinkUnavailableError only.
  const hub = new controlPlaneApi.InProcessAgentHub({
    unavailableError: (message) => new agentApi.LinkUnavailableError(message),
  });
  let controlPlane;
  try {
    controlPlane = await controlPlaneApi.createControlPlane({
      ...config,
      portalDir: config.portalDir ?? PORTAL_DIR,
      link: { inProcess: hub },
      logLevel,
      logDestination: sink,
    });
  } catch (error) {
    await sink.close();
    if (error.code === 'EADDRINUSE') {
      throw new StartError(
        `${config.host}:${config.port} is in use (another npm start?); set GPUSHARDS_PORT to another port`,
      );
    }
    throw error;
  }

  let agent;
  let hostId;
  const computeLedgerDir =
    process.env.GPUSHARDS_COMPUTE_LEDGER_DIR || join(config.dataDir, LEDGER_SUBDIR);
  if (docker.docker !== undefined) {
    hostId = hostIdFor(config.dataDir);
    step(`starting the agent for this host (${hostId})`);
    try {
      agent = await agentApi.createAgent({
        hostId,
        link: { custom: hub.connectAgent(hostId) },
        gpus: gpuSource,
        interposerPath: INTERPOSER_PATH,
        stateDir: join(config.dataDir, AGENT_STATE_SUBDIR),
        computeLedgerDir,
        ...tunables,
        docker: docker.docker,
        logLevel,
        logDestination: sink,
      });
    } catch (error) {
      await controlPlane.close();
      await sink.close();
      throw new StartError(`the agent could not start: ${error.message}`);
    }
  }

  const adopted = agent ? await runningShardContainers(docker.docker, hostId) : 0;
  const suspendBudgetBytes = agent ? await suspendBudgetOf(agent) : undefined;
  printBanner({
    controlPlane,
    config,
    logPath,
    docker,
    agent,
    hostId,
    adopted,
    computeLedgerDir,
    suspendBudgetBytes,
    simulated,
    nvml,
    nvmlLibrary,
    formatSize,
    tokenFile: join(config.dataDir, controlPlaneApi.ADMIN_TOKEN_FILE),
  });

  let stopping = false;
  const shutdown = async (signal) => {
    if (stopping) {
      say(`gpushards: ${signal} again: exiting without waiting`);
      process.exit(130);
    }
    stopping = true;
    say('');
    step(
      agent
        ? 'stopping the agent and the control plane; shard containers keep running and the next npm start finds them'
        : 'stopping the control plane',
    );
    try {
      await agent?.stop();
      await controlPlane.close();
      await sink.close();
      step('stopped');
      process.exit(0);
    } catch (error) {
      process.stderr.write(`gpushards: stopping failed: ${error.stack ?? error}\n`);
      process.exit(1);
    }
  };
  process.on('SIGINT', () => void shutdown('SIGINT'));
  process.on('SIGTERM', () => void shutdown('SIGTERM'));
}

/** GPUSHARDS_SUSPEND_BUDGET and GPUSHARDS_COMPUTE_TURNS as the agent reads them; a StartError if bad. */
function agentTunables(agentApi) {
  try {
    const read = agentApi.agentOptionsFromEnv({
      GPUSHARDS_HOST_ID: 'one-box',
      GPUSHARDS_SUSPEND_BUDGET: process.env.GPUSHARDS_SUSPEND_BUDGET,
      GPUSHARDS_COMPUTE_TURNS: process.env.GPUSHARDS_COMPUTE_TURNS,
    });
    return {
      computeTurns: read.computeTurns,
      ...(read.suspendBudget !== undefined ? { suspendBudget: read.suspendBudget } : {}),
    };
  } catch (error) {
    if (error instanceof agentApi.ConfigError) throw new StartError(error.message);
    throw error;
  }
}

/** The host RAM the agent lets suspended shards take, as it registered it (its metric); 0: none. */
async function suspendBudgetOf(agent) {
  const line = /^gpushards_agent_suspend_budget_bytes(?:\{[^}]*\})? (\S+)$/m.exec(
    await agent.metrics(),
  );
  return line === null ? undefined : Number(line[1]);
}

/** Fails with a StartError when host:port is taken (the same check listen does, done first). */
function assertPortFree(host, port) {
  if (port === 0) return Promise.resolve();
  return new Promise((resolve, reject) => {
    const probe = createServer();
    probe.once('error', (error) => {
      reject(
        error.code === 'EADDRINUSE'
          ? new StartError(
              `${host}:${port} is in use (another npm start?); set GPUSHARDS_PORT to another port`,
            )
          : error,
      );
    });
    probe.listen({ host, port, exclusive: true }, () => probe.close(() => resolve()));
  });
}

/**
 * The embedded database takes one process: say so once, before starting, when another live
 * process holds it (the control plane checks again when it opens it).
 */
function assertDatabaseFree(embeddedDataDir) {
  const lockPath = join(embeddedDataDir, 'gpushards.pid');
  let holder;
  try {
    holder = Number.parseInt(readFileSync(lockPath, 'utf8'), 10);
  } catch {
    return;
  }
  if (!Number.isInteger(holder) || holder === process.pid) return;
  try {
    process.kill(holder, 0);
  } catch (error) {
    if (error.code === 'ESRCH') return; // left by a process that died: the control plane takes it over
  }
  throw new StartError(
    `the embedded database in ${shown(embeddedDataDir)} is open in process ${holder} (another npm start?); ` +
      `stop that one, or set GPUSHARDS_DATA_DIR to another folder (if no control plane runs there, delete ${shown(lockPath)})`,
  );
}

/** Shard containers of this host that Docker runs now (what the agent adopted at start). */
async function runningShardContainers(docker, hostId) {
  const containers = await docker.listContainers({
    filters: { label: [`io.gpushards.host=${hostId}`], status: ['running'] },
  });
  return containers.length;
}

function printBanner(facts) {
  const { controlPlane, config, docker, agent, simulated, formatSize } = facts;
  const database = config.database.url
    ? 'PostgreSQL (DATABASE_URL)'
    : `embedded PostgreSQL (PGlite) in ${shown(config.database.embeddedDataDir)}`;
  const rule = '─'.repeat(78);
  say('');
  say(rule);
  say(
    agent
      ? ' GPU Shards is running on this machine (control plane + agent in one process)'
      : ' GPU Shards control plane is running on this machine (no agent: see Docker below)',
  );
  say('');
  say(`   portal        ${controlPlane.url}/    (sign in with the admin token below)`);
  say(
    `   GraphQL       ${controlPlane.graphqlUrl}   (POST; in a browser: ${controlPlane.url}/explorer)`,
  );
  say(
    `   CLI           npx gpushards login --url ${controlPlane.url} --token "$(cat ${shown(facts.tokenFile)})"`,
  );
  say(`   metrics       ${controlPlane.url}/metrics`);
  say(`   admin token   ${shown(facts.tokenFile)}   (ADMIN=$(cat ${shown(facts.tokenFile)}))`);
  say(`   data folder   ${shown(config.dataDir)}   database: ${database}`);
  say(`   log           ${shown(facts.logPath)}   (warnings and errors also show here)`);
  say('');
  if (docker.docker === undefined) {
    say(`   Docker        NOT FOUND (${docker.problem})`);
    say('');
    say('   Without a Docker engine no agent runs here: the API, teams, quotas and tokens');
    say('   work, but createShard answers NO_CAPACITY until a host is online. Start Docker');
    say('   (or set DOCKER_HOST) and run npm start again.');
    if (!simulated)
      say(`   An NVIDIA driver was found (${facts.nvmlLibrary}); it is not used without Docker.`);
  } else {
    say(`   Docker        engine ${docker.version} (API ${docker.apiVersion})`);
    const inventory = agent.inventory;
    say(
      `   host          ${facts.hostId}: ${inventory.gpus.length} ${simulated ? 'simulated ' : ''}GPU(s), ` +
        `driver ${inventory.driverVersion}, CUDA ${inventory.cudaVersion}`,
    );
    for (const gpu of inventory.gpus) {
      say(`     GPU ${gpu.index}  ${gpu.model}  ${formatSize(gpu.totalBytes)}  ${gpu.uuid}`);
    }
    say(
      `   per shard     a CUDA context takes ${formatSize(inventory.contextOverheadBytes)}; it is added to each shard's cap`,
    );
    say(
      `   shards        ${facts.adopted} shard container(s) of this host running now${facts.adopted > 0 ? ' (found again and adopted)' : ''}`,
    );
    say(
      `   compute       shards take turns on each GPU by their compute share (ledger ${shown(facts.computeLedgerDir)})`,
    );
    if (facts.suspendBudgetBytes !== undefined) {
      say(
        facts.suspendBudgetBytes > 0
          ? `   elastic       suspended shards' GPU memory may take ${formatSize(facts.suspendBudgetBytes)} of host RAM (GPUSHARDS_SUSPEND_BUDGET)`
          : '   elastic       this host does not suspend shards (the log says why: "this host does not suspend shards")',
      );
    }
    if (simulated) {
      say('');
      say('   ┌ SIMULATED GPUs ────────────────────────────────────────────────────────');
      say(
        process.env.GPUSHARDS_SIMULATE_GPUS
          ? `   │ GPUSHARDS_SIMULATE_GPUS=${process.env.GPUSHARDS_SIMULATE_GPUS} asks for simulated GPUs.`
          : `   │ No NVIDIA driver here (${facts.nvml.problem}).`,
      );
      say('   │ The GPUs above are simulated by the fake libcuda.so.1 / libnvidia-ml.so.1');
      say(`   │ in ${shown(FAKE_DRIVER_DIR)}, mounted into every shard in place of a driver.`);
      say('   │ Caps are enforced by the real interposer (libvgpu.so) against that fake');
      say("   │ driver: allocations past a shard's cap fail with CUDA_ERROR_OUT_OF_MEMORY.");
      say('   │ No real GPU memory is used. Size them with GPUSHARDS_SIMULATE_GPUS="2x24g".');
      say('   └────────────────────────────────────────────────────────────────────────');
    }
  }
  say('');
  if (agent) {
    say(' Try it: open the portal, or README.md "Try it". Ctrl-C stops the control plane');
    say(' and the agent; shard containers keep running, and the next npm start finds them.');
  } else {
    say(' Ctrl-C stops the control plane.');
  }
  say(rule);
}

main().catch((error) => {
  // Start-up errors say what is wrong; a stack helps only with a bug (GPUSHARDS_LOG_LEVEL=debug).
  const debug = /^(debug|trace)$/.test(process.env.GPUSHARDS_LOG_LEVEL ?? '');
  let message = error.stack ?? String(error);
  if (error instanceof StartError) message = error.message;
  else if (error instanceof Error && !debug) {
    message = `${error.message}\n(GPUSHARDS_LOG_LEVEL=debug npm start shows where it failed)`;
  }
  process.stderr.write(`gpushards: ${message}\n`);
  process.exit(1);
});
