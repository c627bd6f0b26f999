import { pathToFileURL } from 'node:url';
import { loadConfigFromEnv } from '../config/control-plane-config.js';
import { describeDatabase, PrismaService } from '../database/index.js';
import { rotateSecretsKeyFile, rotateSecretsKeyVariable } from './rotate-secrets-key.js';

const USAGE = `usage: node apps/control-plane/dist/secrets/cli.js rotate

Seals every shard's secret env values again with a new key, in one transaction.
Stop the control planes first (they hold the old key in memory), start them after.

  key in the data folder ($GPUSHARDS_DATA_DIR/secrets.key, the default):
      writes a new key, re-encrypts, then replaces secrets.key (run it again if it was
      interrupted: it finishes the job)
  key in GPUSHARDS_SECRETS_KEY:
      give the new key in GPUSHARDS_SECRETS_NEW_KEY (openssl rand -base64 32); afterwards
      set GPUSHARDS_SECRETS_KEY to it on every control plane

The database: DATABASE_URL when set, else the embedded one in the data folder.`;

export async function runSecretsCli(
  args: readonly string[],
  env: NodeJS.ProcessEnv = process.env,
  print: (line: string) => void = (line) => console.log(line),
): Promise<number> {
  if (args.length !== 1 || args[0] !== 'rotate') {
    print(USAGE);
    return 2;
  }
  const config = loadConfigFromEnv(env);
  const newKey = env['GPUSHARDS_SECRETS_NEW_KEY'];
  if (config.secretsKey !== undefined && (newKey === undefined || newKey === '')) {
    print('GPUSHARDS_SECRETS_KEY is set: give the new key in GPUSHARDS_SECRETS_NEW_KEY');
    return 2;
  }
  const prisma = await PrismaService.open(config.database);
  try {
    const result =
      config.secretsKey === undefined
        ? await rotateSecretsKeyFile(prisma, config.dataDir)
        : await rotateSecretsKeyVariable(prisma, config.secretsKey, newKey!);
    print(
      `${describeDatabase(config.database)}: secret env of ${result.shards} shard(s) sealed with key ${result.keyId}`,
    );
    if (config.secretsKey !== undefined) {
      print('now set GPUSHARDS_SECRETS_KEY to the new key on every control plane and start them');
    }
    return 0;
  } finally {
    await prisma.close();
  }
}

if (import.meta.url === pathToFileURL(process.argv[1] ?? '').href) {
  runSecretsCli(process.argv.slice(2)).then(
    (code) => {
      process.exitCode = code;
    },
    (error: unknown) => {
      console.error(error instanceof Error ? error.message : error);
      process.exitCode = 1;
    },
  );
}
