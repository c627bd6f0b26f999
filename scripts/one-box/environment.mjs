// What the one-box finds on this machine: the Docker engine, an NVIDIA driver, and this
// data folder's host id.
import { randomBytes } from 'node:crypto';
import { mkdirSync, readFileSync, writeFileSync } from 'node:fs';
import { hostname } from 'node:os';
import { join } from 'node:path';

/** Default simulated GPUs when the machine has none and GPUSHARDS_SIMULATE_GPUS is unset. */
export const DEFAULT_SIMULATED_GPUS = '2x24g';
const HOST_ID_FILE = 'host-id';
const HOST_ID = /^[A-Za-z0-9_-]{1,64}$/;

/**
 * The Docker engine's version, or the reason it cannot be reached. Uses dockerode's defaults
 * (DOCKER_HOST, else /var/run/docker.sock), as the agent does.
 */
export async function findDocker(Docker) {
  const docker = new Docker();
  try {
    const version = await docker.version();
    return { docker, version: version.Version, apiVersion: version.ApiVersion };
  } catch (error) {
    const where = process.env.DOCKER_HOST ?? '/var/run/docker.sock';
    return { docker: undefined, problem: `${where}: ${error.message}` };
  }
}

/**
 * Whether an NVIDIA driver is there: the NVML library loads. The agent does the real
 * discovery; this only decides between real and simulated GPUs.
 */
export function findNvml(koffi, library) {
  try {
    koffi.load(library);
    return { found: true };
  } catch {
    return { found: false, problem: `${library} does not load` };
  }
}

/**
 * This data folder's host id: GPUSHARDS_HOST_ID, else the one saved in `<dataDir>/host-id`,
 * else a new one (the machine's name plus a random suffix). One per data folder, not per
 * machine: two data folders on one machine are two hosts, so neither agent ever touches the
 * other's containers (the agent removes every container of its host id that its control
 * plane does not know).
 */
export function hostIdFor(dataDir, env = process.env) {
  if (env.GPUSHARDS_HOST_ID) {
    if (!HOST_ID.test(env.GPUSHARDS_HOST_ID)) {
      throw new Error(
        `GPUSHARDS_HOST_ID must be 1-64 characters of A-Z, a-z, 0-9, "_" and "-", got ${JSON.stringify(env.GPUSHARDS_HOST_ID)}`,
      );
    }
    return env.GPUSHARDS_HOST_ID;
  }
  const path = join(dataDir, HOST_ID_FILE);
  try {
    const saved = readFileSync(path, 'utf8').trim();
    if (HOST_ID.test(saved)) return saved;
    throw new Error(`${path} holds no valid host id (${JSON.stringify(saved)}); fix or delete it`);
  } catch (error) {
    if (error.code !== 'ENOENT') throw error;
  }
  const name =
    hostname()
      .replace(/[^A-Za-z0-9_-]+/g, '-')
      .replace(/^-+|-+$/g, '')
      .slice(0, 50) || 'host';
  const id = `${name}-${randomBytes(3).toString('hex')}`;
  mkdirSync(dataDir, { recursive: true });
  writeFileSync(path, `${id}\n`);
  return id;
}
