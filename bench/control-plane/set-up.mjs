// The create-shard bench's set-up, in a process of its own (create-shard.mjs forks it): migrates
// an empty database with a control plane of the build it is given, registers the hosts and
// creates the teams (generous quotas) with a MEMBER token each, then sends the tokens back and
// exits. A process per build, since two builds' Prisma schema engines cannot share one.
import { readFile } from 'node:fs/promises';
import { join } from 'node:path';
import { Writable } from 'node:stream';
import { teamToken } from '../graphql.mjs';

const GiB = 2 ** 30;
const MiB = 2 ** 20;

function registerRequest(i, gpusPerHost) {
  const hostId = `host-${String(i).padStart(4, '0')}`;
  return {
    protocolVersion: 1,
    hostId,
    host: {
      hostId,
      name: hostId,
      labels: { zone: `zone-${i % 4}` },
      agentVersion: 'bench',
      driverVersion: '550.54',
      cudaVersion: '12.4',
      simulated: true,
      contextOverheadBytes: 512 * MiB,
    },
    gpus: Array.from({ length: gpusPerHost }, (_, index) => ({
      uuid: `GPU-${hostId}-${index}`,
      index,
      model: 'NVIDIA H100 80GB HBM3',
      totalBytes: 80 * GiB,
      usedBytes: 0,
    })),
    runningShards: [],
  };
}

/**
 * registerHost, tried again when its transaction could not start in time: on a loaded shared
 * box (load average 20+) the pool's 2 s wait for a connection ran out and the set-up died.
 */
async function registerWithRetries(fleet, request, tries = 5) {
  for (let attempt = 1; ; attempt++) {
    try {
      return await fleet.registerHost(request);
    } catch (error) {
      if (attempt >= tries || error?.code !== 'P2028') throw error;
    }
  }
}

/** The fleet, teams and tokens, through a control plane of the build `buildDist` that then stops. */
async function setUp({ database, dataDir, dist: buildDist, hosts, gpusPerHost, teams }) {
  const { createControlPlane } = await import(`${buildDist}/control-plane.js`);
  const { AgentReportsService } = await import(`${buildDist}/fleet/agent-reports.service.js`);
  const silent = new Writable({ write: (_chunk, _encoding, done) => done() });
  const setup = await createControlPlane({
    dataDir,
    database,
    hostOfflineSeconds: 86_400,
    port: 0,
    logLevel: 'silent',
    operatorOutput: silent,
    // Set-up only: hundreds of admin requests at once, past a token's rate limit.
    security: { enforceLimits: false },
  });
  try {
    const fleet = setup.app.get(AgentReportsService);
    for (let i = 0; i < hosts; i += 10) {
      await Promise.all(
        Array.from({ length: 10 }, (_, k) =>
          registerWithRetries(fleet, registerRequest(i + k, gpusPerHost)),
        ),
      );
    }
    const admin = (await readFile(join(dataDir, 'admin-token'), 'utf8')).trim();
    const tokens = [];
    for (let i = 0; i < teams; i++) {
      tokens.push(
        await teamToken(setup.graphqlUrl, admin, {
          team: `team-${i}`,
          maxTotal: '1000t',
          tokenName: 'bench',
        }),
      );
    }
    return tokens;
  } finally {
    await setup.close();
  }
}

process.once('message', (job) => {
  setUp(job).then(
    (tokens) => process.send(tokens, () => process.exit(0)),
    (error) => {
      console.error(error);
      process.exit(1);
    },
  );
});
