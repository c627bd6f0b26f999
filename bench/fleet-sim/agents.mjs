// One process of simulated agents (forked by run.mjs). Each agent is its own NATS user and
// speaks the real protocol through the agent's own link (apps/agent's NatsAgentLink: its
// per-host subjects, inbox and command answering): register, heartbeat and reconcile at the
// given intervals, and launch / stop / delete / resize answered with simulated containers
// that run and exit on schedule. No Docker, no GPUs.
//
// Messages from the parent: {type: 'start', hosts: [{hostId, auth}], servers, heartbeatSeconds,
// reconcileSeconds, faults}, {type: 'view'}, {type: 'stop'}. To the parent: {type: 'started'},
// {type: 'launched', shardId, at}, {type: 'view', hosts, stats}, {type: 'stopped'}.
import { randomUUID } from 'node:crypto';
import { join, resolve } from 'node:path';
import { fileURLToPath, pathToFileURL } from 'node:url';

import { pino } from 'pino';

import { Faults } from './faults.mjs';

const ROOT = resolve(fileURLToPath(new URL('../..', import.meta.url)));
const { NatsAgentLink } = await import(
  pathToFileURL(join(ROOT, 'apps/agent/dist/link/nats-agent-link.js')).href
);
const { LinkUnavailableError } = await import(
  pathToFileURL(join(ROOT, 'apps/agent/dist/link/agent-link.js')).href
);

const GiB = 2 ** 30;
const MiB = 2 ** 20;
const PROTOCOL_VERSION = 1;
const silent = pino({ level: 'silent' });

/** Mixed models: most hosts one model, every fourth host two halves of different models. */
const MODELS = [
  { model: 'NVIDIA H100 80GB HBM3', totalBytes: 80 * GiB },
  { model: 'NVIDIA A100-SXM4-40GB', totalBytes: 40 * GiB },
  { model: 'NVIDIA L40S', totalBytes: 48 * GiB },
];

export function simulatedGpus(hostId, index) {
  return Array.from({ length: 8 }, (_, gpu) => {
    const kind = index % 4 === 3 && gpu >= 4 ? (index + 1) % 3 : index % 3;
    return { uuid: `GPU-${hostId}-${gpu}`, index: gpu, ...MODELS[kind], usedBytes: 0 };
  });
}

const stats = {
  registers: 0,
  registerMs: [],
  connectRetries: 0,
  heartbeats: 0,
  reconciles: 0,
  reconcileMs: [],
  reconcileLaunches: 0,
  reconcileRemovals: 0,
  reconcileStops: 0,
  unanswered: 0,
  /** Registrations that went unanswered and were asked again. */
  registerRetries: 0,
  commands: { launch: 0, stop: 0, delete: 0, resize: 0, reconcile: 0 },
  repeatedCommands: 0,
  launchesOfRunning: 0,
  exits: 0,
  stateEvents: 0,
};

class SimulatedAgent {
  constructor(hostId, index, link, options, faults) {
    this.hostId = hostId;
    this.index = index;
    this.link = link;
    this.options = options;
    this.faults = faults;
    this.gpus = simulatedGpus(hostId, index);
    /** shardId → {containerId, running, spec, exitAt, exitCode, usedFraction} */
    this.containers = new Map();
    /** commandId → reply, as the agent's journal */
    this.journal = new Map();
    this.sequence = 0;
    this.timers = [];
    this.registered = false;
  }

  async start() {
    // On a loaded machine a connect can time out in authentication: try again, as an agent
    // restarted by its service manager would.
    for (let attempt = 1; ; attempt++) {
      try {
        await this.link.connect();
        break;
      } catch (error) {
        if (attempt >= 10) throw error;
        stats.connectRetries++;
        await new Promise((r) => setTimeout(r, 500 * attempt));
      }
    }
    await this.link.onCommand((command) => this.command(command));
    this.link.onRestored(() => void this.register().catch(() => undefined));
    await this.register();
    // Spread over the interval, as agents that started at different times would be.
    const every = (seconds, task) => {
      const first = setTimeout(
        () => {
          void task();
          this.timers.push(setInterval(() => void task(), seconds * 1000));
        },
        Math.random() * seconds * 1000,
      );
      this.timers.push(first);
    };
    every(this.options.heartbeatSeconds, () => this.heartbeat());
    every(this.options.reconcileSeconds, () => this.reconcile());
    every(1, () => this.exits());
  }

  async stop() {
    for (const timer of this.timers) clearTimeout(timer);
    await this.link.close();
  }

  async register() {
    for (let attempt = 0; ; attempt++) {
      const started = performance.now();
      try {
        const reply = await this.link.register({
          protocolVersion: PROTOCOL_VERSION,
          hostId: this.hostId,
          host: {
            hostId: this.hostId,
            name: this.hostId,
            labels: { zone: `zone-${this.index % 4}` },
            agentVersion: 'fleet-sim',
            driverVersion: '550.54',
            cudaVersion: '12.4',
            simulated: true,
            contextOverheadBytes: 512 * MiB,
          },
          gpus: this.gpuUsage(),
          runningShards: [...this.containers].map(([shardId, c]) => ({
            shardId,
            containerId: c.containerId,
            state: c.running ? 'RUNNING' : c.exitCode === undefined ? 'STOPPED' : 'EXITED',
          })),
        });
        if (!reply.accepted) throw new Error(`register refused: ${reply.error.message}`);
        stats.registers++;
        stats.registerMs.push(performance.now() - started);
        this.registered = true;
        this.reconciledAt = Date.now();
        this.converge(reply);
        return;
      } catch (error) {
        if (!(error instanceof LinkUnavailableError)) throw error;
        stats.unanswered++;
        stats.registerRetries++;
        // As the agent does (apps/agent register-retry.ts): jittered, so that the agents a
        // control plane could not answer together do not all come back at one moment.
        const ceiling = Math.min(30_000, 500 * 2 ** Math.min(attempt, 6));
        await new Promise((r) => setTimeout(r, ceiling / 2 + Math.random() * (ceiling / 2)));
      }
    }
  }

  gpuUsage() {
    const used = new Map();
    for (const c of this.containers.values()) {
      if (!c.running) continue;
      for (const gpu of c.spec.gpus) {
        used.set(gpu.uuid, (used.get(gpu.uuid) ?? 0) + Math.floor(gpu.limitBytes * c.usedFraction));
      }
    }
    return this.gpus.map((gpu) => ({ ...gpu, usedBytes: used.get(gpu.uuid) ?? 0 }));
  }

  async heartbeat() {
    if (!this.registered) return;
    const shards = [];
    for (const [shardId, c] of this.containers) {
      if (!c.running) continue;
      const usedOf = (gpu) => Math.floor(gpu.limitBytes * c.usedFraction);
      shards.push({
        shardId,
        usedBytesPerGpu: c.spec.gpus.map((gpu) => ({ gpuUuid: gpu.uuid, usedBytes: usedOf(gpu) })),
        // What an agent running the interposer (real bytes, NVML) and the compute ledger
        // (busy ratio, last kernel) adds for each shard: the host fence's part of a heartbeat.
        ...(this.options.fenceFields
          ? {
              realBytesPerGpu: c.spec.gpus.map((gpu) => ({
                gpuUuid: gpu.uuid,
                realBytes: usedOf(gpu) + (this.sequence % 2) * 2 ** 20,
              })),
              activityPerGpu: c.spec.gpus.map((gpu) => ({
                gpuUuid: gpu.uuid,
                busyRatio: c.usedFraction,
                lastKernelSeconds: 0.5,
              })),
            }
          : {}),
      });
    }
    const gpus = this.gpuUsage();
    const message = {
      protocolVersion: PROTOCOL_VERSION,
      hostId: this.hostId,
      sentAt: new Date().toISOString(),
      sequence: this.sequence++,
      gpus: gpus.map(({ uuid, usedBytes }) => ({ uuid, usedBytes })),
      shards,
      ...(this.options.fenceFields
        ? {
            unattributedBytesPerGpu: gpus.map(({ uuid }) => ({
              gpuUuid: uuid,
              bytes: (this.sequence % 2) * 2 ** 20,
            })),
          }
        : {}),
    };
    stats.heartbeats++;
    await this.faults.publish(this, 'heartbeat', message, (m) => this.link.heartbeat(m));
  }

  async reconcile() {
    if (!this.registered) return;
    const started = performance.now();
    const mark = Date.now();
    try {
      const reply = await this.link.reconcile({
        protocolVersion: PROTOCOL_VERSION,
        hostId: this.hostId,
        containers: [...this.containers].map(([shardId, c]) => ({
          shardId,
          containerId: c.containerId,
          running: c.running,
        })),
      });
      stats.reconciles++;
      stats.reconcileMs.push(performance.now() - started);
      this.reconciledAt = Date.now();
      this.converge(reply, mark);
    } catch (error) {
      if (!(error instanceof LinkUnavailableError)) throw error;
      stats.unanswered++;
    }
  }

  /**
   * As the agent's reconcile plan: run the desired, stop the stopped, remove the rest, but
   * leave alone what a command touched since the request went (`mark`, as the agent's
   * commandMark): the reply may predate it.
   */
  converge(reply, mark = 0) {
    const desired = new Map(reply.desired.map((spec) => [spec.shardId, spec]));
    const stopped = new Set(reply.stoppedShardIds);
    for (const [shardId, spec] of desired) {
      const c = this.containers.get(shardId);
      if (c === undefined) {
        stats.reconcileLaunches++;
        this.run(spec);
      }
    }
    for (const [shardId, c] of this.containers) {
      if (desired.has(shardId) || (c.touchedAt ?? 0) >= mark) continue;
      if (stopped.has(shardId)) {
        if (c.running) {
          stats.reconcileStops++;
          this.end(shardId, c, 'STOPPED', 0);
        }
        continue;
      }
      if (!c.running || !desired.has(shardId)) {
        stats.reconcileRemovals++;
        this.containers.delete(shardId);
      }
    }
  }

  /** A container that runs for a while, then exits 0 (some run past the end of the run). */
  run(spec) {
    const lifeSeconds = this.options.lifeSeconds;
    const life = lifeSeconds[0] + Math.random() * (lifeSeconds[1] - lifeSeconds[0]);
    const c = {
      containerId: randomUUID().replaceAll('-', '') + randomUUID().replaceAll('-', ''),
      running: true,
      spec,
      exitAt: Date.now() + life * 1000,
      usedFraction: 0.2 + Math.random() * 0.7,
      touchedAt: Date.now(),
    };
    this.containers.set(spec.shardId, c);
    void this.state(spec.shardId, 'RUNNING', { containerId: c.containerId });
    return c;
  }

  end(shardId, c, state, exitCode) {
    c.running = false;
    c.exitCode = exitCode;
    void this.state(shardId, state, { containerId: c.containerId, exitCode });
  }

  exits() {
    const now = Date.now();
    for (const [shardId, c] of this.containers) {
      if (c.running && c.exitAt <= now) {
        stats.exits++;
        this.end(shardId, c, 'EXITED', 0);
      }
    }
  }

  async state(shardId, state, fields) {
    stats.stateEvents++;
    const event = {
      protocolVersion: PROTOCOL_VERSION,
      hostId: this.hostId,
      eventId: randomUUID(),
      shardId,
      state,
      at: new Date().toISOString(),
      ...fields,
    };
    await this.faults.publish(this, 'state', event, (m) => this.link.publishState(m));
  }

  async command(command) {
    const seen = this.journal.get(command.commandId);
    if (seen !== undefined) {
      stats.repeatedCommands++;
      return seen;
    }
    stats.commands[command.type]++;
    const reply = this.execute(command);
    this.journal.set(command.commandId, reply);
    if (this.journal.size > 2048) this.journal.delete(this.journal.keys().next().value);
    return this.faults.answer(this, reply);
  }

  execute(command) {
    const header = {
      protocolVersion: PROTOCOL_VERSION,
      hostId: this.hostId,
      commandId: command.commandId,
      ok: true,
    };
    switch (command.type) {
      case 'launch': {
        let c = this.containers.get(command.shard.shardId);
        if (c !== undefined && c.running) {
          stats.launchesOfRunning++;
          c.touchedAt = Date.now();
        } else c = this.run(command.shard);
        process.send({ type: 'launched', shardId: command.shard.shardId, at: Date.now() });
        return {
          ...header,
          result: { type: 'launch', state: 'RUNNING', containerId: c.containerId },
        };
      }
      case 'stop': {
        const c = this.containers.get(command.shardId);
        const wasRunning = c?.running ?? false;
        if (c !== undefined && c.running) this.end(command.shardId, c, 'STOPPED', 0);
        return { ...header, result: { type: 'stop', wasRunning } };
      }
      case 'delete': {
        const removed = this.containers.delete(command.shardId);
        return { ...header, result: { type: 'delete', removed } };
      }
      case 'resize': {
        const c = this.containers.get(command.shardId);
        if (c === undefined) {
          return {
            ...header,
            ok: false,
            error: { code: 'UNKNOWN_SHARD', message: `no shard ${command.shardId} here` },
          };
        }
        c.spec = { ...c.spec, gpus: command.gpus };
        return { ...header, result: { type: 'resize', gpus: command.gpus } };
      }
      case 'reconcile':
        // Taken on; the simulated agent reconciles on its own period.
        return { ...header, result: { type: 'reconcile' } };
    }
  }

  view() {
    return [...this.containers].map(([shardId, c]) => ({
      shardId,
      running: c.running,
      gpus: c.spec.gpus,
    }));
  }
}

let agents = [];

process.on('message', async (message) => {
  if (message.type === 'start') {
    const faults = new Faults(message.faults ?? {});
    agents = message.hosts.map(
      ({ hostId, index, auth }) =>
        new SimulatedAgent(
          hostId,
          index,
          new NatsAgentLink(hostId, { servers: message.servers, auth }, silent),
          message,
          faults,
        ),
    );
    // A few at a time: a thousand TLS-less connects and registers at once would only queue.
    for (let i = 0; i < agents.length; i += 25) {
      await Promise.all(agents.slice(i, i + 25).map((agent) => agent.start()));
    }
    globalThis.faults = faults;
    process.send({ type: 'started' });
  } else if (message.type === 'view') {
    const hosts = Object.fromEntries(agents.map((agent) => [agent.hostId, agent.view()]));
    process.send({ type: 'view', hosts, stats, faults: globalThis.faults?.counts ?? {} });
  } else if (message.type === 'reconciled') {
    const count = agents.filter((agent) => (agent.reconciledAt ?? 0) >= message.since).length;
    process.send({ type: 'reconciled', count });
  } else if (message.type === 'stop') {
    await Promise.all(agents.map((agent) => agent.stop().catch(() => undefined)));
    process.send({ type: 'stopped' });
  } else if (message.type === 'lose') {
    // Hosts lost at once: their agents stop talking (the connection closes).
    const lost = new Set(message.hostIds);
    await Promise.all(
      agents.filter((agent) => lost.has(agent.hostId)).map((agent) => agent.stop()),
    );
    agents = agents.filter((agent) => !lost.has(agent.hostId));
    process.send({ type: 'lost' });
  }
});
