import { rmSync } from 'node:fs';

import { pino } from 'pino';

import type { AgentOptions } from '../config/agent-options.js';
import { createAgent, type Agent } from '../create-agent.js';
import { parseSimulatedGpus } from '../gpus/simulated-gpus.js';
import { ScriptedControlPlane } from './control-plane-peer.js';
import { cleanUpDocker, importCudaProbeImage } from './docker.js';
import { startNatsServer, type TestNatsServer } from './nats-server.js';
import { fakeLibraries, nativeArtifacts } from './native.js';
import { waitFor } from './processes.js';

/** One agent launching real containers, as the agent's Docker tests run it. */
export interface DockerAgentStack {
  readonly nats: TestNatsServer;
  readonly controlPlane: ScriptedControlPlane;
  readonly agent: Agent;
  /** Stops the agent, the peer and nats-server; removes the host's containers, the image and the state folder. */
  stop(): Promise<void>;
}

export interface DockerAgentSettings {
  readonly hostId: string;
  /** The probe image's tag (importCudaProbeImage), with any programs it should hold besides the probe. */
  readonly image: string;
  readonly programs?: Record<string, string>;
  readonly stateDir: string;
  /** Simulated GPUs, e.g. "1xTest GPU:24g". */
  readonly gpus: string;
  /** What the test sets beyond the shared options (a ledger folder, the fences' settings). */
  readonly options?: Partial<AgentOptions>;
}

/**
 * The probe image, a real nats-server, a scripted control plane and an agent on simulated GPUs
 * with the fake driver and libvgpu.so, once the agent's reconcile at start has reached the
 * peer: the scripted peer learns a launch only from its reply, so a launch sent before that
 * request could be answered as "not desired". What is started is stopped again if a later step
 * fails.
 */
export async function startDockerAgent(settings: DockerAgentSettings): Promise<DockerAgentStack> {
  const { hostId, image, stateDir } = settings;
  let nats: TestNatsServer | undefined;
  let controlPlane: ScriptedControlPlane | undefined;
  let agent: Agent | undefined;
  const stop = async (): Promise<void> => {
    await agent?.stop();
    await controlPlane?.close();
    await nats?.stop();
    cleanUpDocker([hostId], [image]);
    rmSync(stateDir, { recursive: true, force: true });
  };
  try {
    importCudaProbeImage(
      image,
      fakeLibraries().cuda,
      nativeArtifacts().interposer,
      settings.programs ?? {},
    );
    nats = await startNatsServer([hostId]);
    controlPlane = await ScriptedControlPlane.connect(nats.url, nats.controlPlane);
    agent = await createAgent({
      hostId,
      link: { nats: { servers: [nats.url], auth: nats.agent(hostId), requestTimeoutMs: 5000 } },
      gpus: {
        kind: 'simulated',
        gpus: parseSimulatedGpus(settings.gpus),
        fakeLibraryDir: fakeLibraries().dir,
      },
      interposerPath: nativeArtifacts().interposer,
      stateDir,
      heartbeatSeconds: 1,
      reconcileSeconds: 3600,
      stopGraceSeconds: 1,
      logLevel: (process.env.GPUSHARDS_TEST_LOG as 'debug' | undefined) ?? 'silent',
      logDestination: pino.destination(2),
      ...settings.options,
    });
    const peer = controlPlane;
    await waitFor('the reconcile at start', () => (peer.reconciles.length > 0 ? true : undefined));
    return { nats, controlPlane, agent, stop };
  } catch (error) {
    await stop();
    throw error;
  }
}
