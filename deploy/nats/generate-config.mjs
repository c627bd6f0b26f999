#!/usr/bin/env node
// Writes users.conf (included by nats-server.conf) and one credentials file per NATS user,
// for a list of agent hosts. Permissions come from @gpushards/protocol (agentPermissions,
// CONTROL_PLANE_PERMISSIONS), the same code the agent and control plane are built with, so
// the server configuration and the subjects in code cannot disagree.
//
//   node deploy/nats/generate-config.mjs --out <dir> [--auth nkey|password|jwt]
//     [--cluster <name>=<host>:<clientPort>:<routePort>,...] <hostId>...
//
// With --cluster (three servers for a cluster that survives one loss), <dir> also receives
// nats-<name>.conf for each server: the same users.conf on every server, routes to the
// others authenticated with a generated route password, and the client and route ports given.
// <dir> receives users.conf and credentials/<user>.env (mode 0600) holding the GPUSHARDS_NATS_*
// variables that user's process needs. Re-running replaces every secret.
// --auth jwt (decentralised: an operator, a system account and the gpushards account, users as
// .creds) is the one where removeHost takes a host's NATS user away at once: the control plane
// gets credentials/control-plane-revocation.json (GPUSHARDS_NATS_REVOCATION_FILE) and re-signs
// the account with the removed hosts' users revoked (docs/operations.md, "NATS users").
// Build the protocol and link libraries first: npx nx run-many -t build -p protocol link
import { randomBytes } from 'node:crypto';
import { chmodSync, copyFileSync, mkdirSync, writeFileSync } from 'node:fs';
import { dirname, join, resolve } from 'node:path';
import { fileURLToPath, pathToFileURL } from 'node:url';
import { parseArgs } from 'node:util';

import {
  CONTROL_PLANE_PERMISSIONS,
  agentPermissions,
  assertValidHostId,
} from '@gpushards/protocol';
import { accountJwt, formatCreds, operatorJwt, userJwt } from '@gpushards/link';
import { nkeys } from '@nats-io/transport-node';

export const CONTROL_PLANE_USER = 'control-plane';

/** The NATS user name of a host's agent. */
export function agentUser(hostId) {
  return `agent-${hostId}`;
}

function newCredential(auth, user) {
  if (auth === 'nkey') {
    const pair = nkeys.createUser();
    return {
      server: { nkey: pair.getPublicKey() },
      seed: new TextDecoder().decode(pair.getSeed()),
    };
  }
  const password = randomBytes(24).toString('base64url');
  return {
    server: { user, password },
    env: { GPUSHARDS_NATS_USER: user, GPUSHARDS_NATS_PASSWORD: password },
  };
}

/** The control plane's user and one per agent host, with their permissions; checks the ids. */
function userEntries(hostIds) {
  if (hostIds.length === 0) throw new Error('give at least one agent host id');
  const seen = new Set();
  const entries = [{ user: CONTROL_PLANE_USER, permissions: CONTROL_PLANE_PERMISSIONS }];
  for (const hostId of hostIds) {
    assertValidHostId(hostId);
    if (seen.has(hostId)) throw new Error(`host id ${JSON.stringify(hostId)} is listed twice`);
    seen.add(hostId);
    entries.push({ user: agentUser(hostId), permissions: agentPermissions(hostId), hostId });
  }
  return entries;
}

export const REVOCATION_FILE = 'control-plane-revocation.json';

/**
 * --auth jwt: the server configuration (operator, system account, a full resolver in <out>/jwt
 * that keeps the newest account JWT pushed to it, both accounts preloaded) and each user's
 * .creds; the control plane also gets the system account's user and the operator's signing
 * key, to push the account again with removed hosts' users revoked. The operator's own seed
 * (credentials/operator.nk) is needed only to re-issue everything: keep it offline.
 */
export async function buildJwtConfig(out, hostIds) {
  const entries = userEntries(hostIds);
  const seed = (pair) => new TextDecoder().decode(pair.getSeed());
  const operator = nkeys.createOperator();
  const signingKey = nkeys.createOperator();
  const system = nkeys.createAccount();
  const account = nkeys.createAccount();
  const systemJwt = await accountJwt(system.getPublicKey(), 'SYS', signingKey);
  const issuedAccount = await accountJwt(account.getPublicKey(), 'gpushards', signingKey);
  const secrets = [];
  const agentUsers = {};
  for (const { user, permissions, hostId } of entries) {
    const pair = nkeys.createUser();
    const jwt = await userJwt(pair.getPublicKey(), user, account, permissionsBlock(permissions));
    secrets.push({ user, creds: formatCreds(jwt, seed(pair)) });
    if (hostId !== undefined) agentUsers[hostId] = pair.getPublicKey();
  }
  const systemUser = nkeys.createUser();
  const revocation = {
    account: issuedAccount,
    signingKeySeed: seed(signingKey),
    systemCreds: formatCreds(
      await userJwt(systemUser.getPublicKey(), `${CONTROL_PLANE_USER}-system`, system),
      seed(systemUser),
    ),
    agentUsers,
  };
  const text =
    '# Written by deploy/nats/generate-config.mjs --auth jwt; do not edit, re-run it.\n' +
    `operator: ${JSON.stringify(await operatorJwt(operator, signingKey, system.getPublicKey()))}\n` +
    `system_account: ${JSON.stringify(system.getPublicKey())}\n` +
    '# Keeps the newest account JWT pushed to it ($SYS.REQ.CLAIMS.UPDATE): a revocation\n' +
    '# outlives a restart.\n' +
    `resolver: { type: full, dir: ${JSON.stringify(resolve(out, 'jwt'))}, allow_delete: false }\n` +
    `resolver_preload: ${JSON.stringify({
      [system.getPublicKey()]: systemJwt,
      [account.getPublicKey()]: issuedAccount,
    })}\n`;
  return { text, secrets, revocation, operatorSeed: seed(operator) };
}

function permissionsBlock(permissions) {
  return {
    publish: permissions.publish,
    subscribe: permissions.subscribe,
    allow_responses: permissions.allow_responses,
  };
}

/**
 * The users.conf text and the secrets per user. nats-server reads JSON as a subset of its
 * configuration syntax, so each user is written as JSON.
 */
export function buildUsers(hostIds, auth = 'nkey') {
  if (auth !== 'password' && auth !== 'nkey') {
    throw new Error(`--auth must be "password", "nkey" or "jwt", got ${JSON.stringify(auth)}`);
  }
  const entries = userEntries(hostIds);
  const users = [];
  const secrets = [];
  for (const { user, permissions } of entries) {
    const credential = newCredential(auth, user);
    users.push({ ...credential.server, permissions: permissionsBlock(permissions) });
    secrets.push({ user, env: credential.env, seed: credential.seed });
  }
  const text =
    '# Written by deploy/nats/generate-config.mjs; do not edit, re-run it.\n' +
    `authorization: {\n  users: ${JSON.stringify(users, null, 2).replace(/\n/g, '\n  ')}\n}\n`;
  return { text, secrets };
}

/** Writes <out>/users.conf, <out>/nats-server.conf and <out>/credentials/*; resolves to the paths. */
export async function writeConfig(out, hostIds, auth = 'nkey') {
  if (auth === 'jwt') return writeJwtConfig(out, hostIds);
  const { text, secrets } = buildUsers(hostIds, auth);
  const credentialsDir = join(out, 'credentials');
  mkdirSync(credentialsDir, { recursive: true, mode: 0o700 });
  const usersFile = join(out, 'users.conf');
  writeFileSync(usersFile, text, { mode: 0o600 });
  chmodSync(usersFile, 0o600);
  const serverConfig = join(out, 'nats-server.conf');
  const here = dirname(fileURLToPath(import.meta.url));
  if (resolve(out) !== here) copyFileSync(join(here, 'nats-server.conf'), serverConfig);
  const credentials = {};
  for (const secret of secrets) {
    const envFile = join(credentialsDir, `${secret.user}.env`);
    let env = secret.env;
    if (secret.seed !== undefined) {
      const seedFile = join(credentialsDir, `${secret.user}.nk`);
      writeFileSync(seedFile, `${secret.seed}\n`, { mode: 0o600 });
      env = { GPUSHARDS_NATS_NKEY_SEED_FILE: seedFile };
    }
    const lines = Object.entries(env).map(([key, value]) => `${key}=${value}\n`);
    writeFileSync(envFile, lines.join(''), { mode: 0o600 });
    credentials[secret.user] = envFile;
  }
  return { serverConfig, usersFile, credentials };
}

async function writeJwtConfig(out, hostIds) {
  const { text, secrets, revocation, operatorSeed } = await buildJwtConfig(out, hostIds);
  const credentialsDir = join(out, 'credentials');
  mkdirSync(credentialsDir, { recursive: true, mode: 0o700 });
  const secret = (file, content) => {
    writeFileSync(file, content, { mode: 0o600 });
    chmodSync(file, 0o600);
    return file;
  };
  const usersFile = secret(join(out, 'users.conf'), text);
  const serverConfig = join(out, 'nats-server.conf');
  const here = dirname(fileURLToPath(import.meta.url));
  if (resolve(out) !== here) copyFileSync(join(here, 'nats-server.conf'), serverConfig);
  secret(join(credentialsDir, 'operator.nk'), `${operatorSeed}\n`);
  const revocationFile = secret(
    join(credentialsDir, REVOCATION_FILE),
    `${JSON.stringify(revocation, null, 2)}\n`,
  );
  const credentials = {};
  for (const { user, creds } of secrets) {
    const credsFile = secret(join(credentialsDir, `${user}.creds`), creds);
    const env = { GPUSHARDS_NATS_CREDS: credsFile };
    if (user === CONTROL_PLANE_USER) env.GPUSHARDS_NATS_REVOCATION_FILE = revocationFile;
    const lines = Object.entries(env).map(([key, value]) => `${key}=${value}\n`);
    credentials[user] = secret(join(credentialsDir, `${user}.env`), lines.join(''));
  }
  return { serverConfig, usersFile, credentials };
}

/**
 * Parses --cluster: `<name>=<host>:<clientPort>:<routePort>` separated by commas, at least
 * three servers (a cluster of two loses its quorum-free routing with either), names and ports
 * unique. Throws naming what is wrong.
 */
export function parseCluster(text) {
  const servers = text.split(',').map((entry) => {
    const match = /^([A-Za-z0-9][A-Za-z0-9_-]{0,62})=([A-Za-z0-9.-]+):(\d{1,5}):(\d{1,5})$/.exec(
      entry.trim(),
    );
    if (match === null) {
      throw new Error(
        `--cluster: ${JSON.stringify(entry)} is not <name>=<host>:<clientPort>:<routePort>`,
      );
    }
    const [, name, host, port, routePort] = match;
    for (const value of [port, routePort]) {
      if (Number(value) < 1 || Number(value) > 65535) {
        throw new Error(`--cluster: port ${value} of ${name} is not from 1 to 65535`);
      }
    }
    return { name, host, port: Number(port), routePort: Number(routePort) };
  });
  if (servers.length < 3) throw new Error('--cluster: give at least three servers');
  const unique = (what, key) => {
    const seen = new Set();
    for (const server of servers) {
      const value = key(server);
      if (seen.has(value)) throw new Error(`--cluster: ${what} ${value} is listed twice`);
      seen.add(value);
    }
  };
  unique('server name', (server) => server.name);
  unique('client address', (server) => `${server.host}:${server.port}`);
  unique('route address', (server) => `${server.host}:${server.routePort}`);
  return servers;
}

/**
 * Writes <out>/nats-<name>.conf for each server of the cluster (users.conf must be next to
 * them: writeConfig); returns {name: path}.
 */
export function writeClusterConfig(out, servers, auth = 'nkey') {
  const routePassword = randomBytes(24).toString('base64url');
  const files = {};
  for (const server of servers) {
    const routes = servers
      .filter((other) => other !== server)
      .map((other) => `nats-route://route:${routePassword}@${other.host}:${other.routePort}`);
    const text =
      '# Written by deploy/nats/generate-config.mjs --cluster; do not edit, re-run it.\n' +
      `server_name: ${JSON.stringify(server.name)}\n` +
      `port: ${server.port}\n` +
      '# As nats-server.conf: a reconcile reply lists every shard of a host.\n' +
      'max_payload: 8MB\n' +
      'cluster: {\n' +
      '  name: "gpushards"\n' +
      `  port: ${server.routePort}\n` +
      `  authorization: { user: "route", password: ${JSON.stringify(routePassword)} }\n` +
      `  routes: ${JSON.stringify(routes)}\n` +
      '}\n' +
      '# The same users, with the same per-agent permissions, on every server.\n' +
      'include "users.conf"\n' +
      (auth === 'jwt'
        ? '# Its own resolver folder (servers may share a machine); the full resolvers of the\n' +
          '# cluster pass an account JWT pushed to one of them on to the others.\n' +
          `resolver: { type: full, dir: ${JSON.stringify(resolve(out, `jwt-${server.name}`))}, allow_delete: false }\n`
        : '');
    const file = join(out, `nats-${server.name}.conf`);
    writeFileSync(file, text, { mode: 0o600 });
    files[server.name] = file;
  }
  return files;
}

async function main() {
  const { values, positionals } = parseArgs({
    options: {
      out: { type: 'string' },
      auth: { type: 'string', default: 'nkey' },
      cluster: { type: 'string' },
    },
    allowPositionals: true,
  });
  if (values.out === undefined) {
    throw new Error(
      'usage: generate-config.mjs --out <dir> [--auth nkey|password|jwt] [--cluster <name>=<host>:<clientPort>:<routePort>,...] <hostId>...',
    );
  }
  const cluster = values.cluster === undefined ? undefined : parseCluster(values.cluster);
  const written = await writeConfig(resolve(values.out), positionals, values.auth);
  console.log(`wrote ${written.serverConfig} and ${written.usersFile}`);
  if (cluster !== undefined) {
    const files = writeClusterConfig(resolve(values.out), cluster, values.auth);
    for (const [name, file] of Object.entries(files)) console.log(`  server ${name}: ${file}`);
    const urls = cluster.map((server) => `nats://${server.host}:${server.port}`).join(',');
    console.log(`  GPUSHARDS_NATS_URL=${urls}`);
  }
  for (const [user, file] of Object.entries(written.credentials)) console.log(`  ${user}: ${file}`);
}

if (import.meta.url === pathToFileURL(process.argv[1] ?? '').href) {
  try {
    await main();
  } catch (error) {
    console.error(`generate-config: ${error.message}`);
    process.exit(1);
  }
}
