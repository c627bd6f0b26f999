import {
  bytes,
  type Bytes,
  type ComputeShare,
  DEFAULT_PRIORITY_CLASS,
  priorityClasses,
} from '@gpushards/limits';
import {
  findReservedEnvKeys,
  MAX_GPUS_PER_HOST,
  shardLaunchSpecSchema,
  userEnvSchema,
} from '@gpushards/protocol';
import { checkComputeInput } from '../compute/compute-input.js';
import type { PlacementPolicy } from '../database/index.js';
import { GPU_MODEL_NAME, InputCheck, type NameRule } from '../validation/input.js';
import type { CreateShardInput, EnvVarInput, PlacementInput } from './shard-input.model.js';

/** Where a shard may go, checked. */
export interface PlacementRequestInput {
  readonly bytesPerGpu: Bytes;
  readonly gpuCount: number;
  readonly gpuModel: { readonly include: string[]; readonly exclude: string[] };
  readonly hostSelector: Readonly<Record<string, string>>;
  readonly policy: PlacementPolicy;
  /** Its compute share per GPU (0 permille: none asked) and mode; the team's bound is checked later. */
  readonly compute: ComputeShare;
}

/** A createShard input, checked. */
export interface ShardRequest extends PlacementRequestInput {
  readonly name: string;
  readonly image: string;
  readonly command: string[];
  readonly env: Readonly<Record<string, string>>;
  /**
   * Secret env values: in clear as checkCreateShardInput returns them, sealed (SecretBox) by
   * ShardMutationsService before anything else sees them; never returned by the API.
   */
  readonly secretEnv: Readonly<Record<string, string>>;
  readonly idempotencyKey: string | null;
  /** Wait as PENDING when it fits nowhere now (else NO_CAPACITY). */
  readonly queue: boolean;
  readonly priorityClass: string;
  readonly maxWaitSeconds: number | null;
  readonly requeue: boolean;
  /** May be suspended to host RAM (docs/elastic.md); its team's quota must allow it. */
  readonly elastic: boolean;
}

/** A week: longer waits are better left without a limit. */
export const MAX_WAIT_SECONDS = 7 * 24 * 3600;

/** Shard names end up in container names and logs. */
export const SHARD_NAME: NameRule = {
  maxLength: 63,
  pattern: /^[a-z0-9](?:[a-z0-9._-]*[a-z0-9])?$/,
  allowed:
    'only lower-case letters, digits, ".", "_" and "-", and must start and end with a letter or digit (like "train-7b")',
};

/** What the agent's launch spec accepts (libs/protocol). */
export const MAX_IMAGE_REFERENCE_LENGTH = 512;
/** Docker's limit on the name part (before the tag and digest). */
export const MAX_IMAGE_NAME_LENGTH = 255;
const MAX_MODEL_TERMS = 16;
const MAX_SELECTOR_LABELS = 32;
const MAX_LABEL_VALUE_LENGTH = 256;
const MAX_IDEMPOTENCY_KEY_LENGTH = 128;
/** The classes are fixed in code (libs/limits), so one index serves every request. */
const PRIORITY_CLASSES = priorityClasses();
const MAX_ENV_KEY_LENGTH = 256;
const LABEL_KEY = /^[A-Za-z0-9][A-Za-z0-9._/-]{0,127}$/;
const CONTROL_CHARACTER = /\p{Cc}/u;
/** Half of a surrogate pair alone: JavaScript strings may hold one, PostgreSQL text may not. */
const LONE_SURROGATE = /\p{Cs}/u;
const NOT_UNICODE = 'is not valid Unicode text: it holds an unpaired surrogate (\\ud800-\\udfff)';
const PRINTABLE_ASCII = /^[\x21-\x7e]+$/;

// The reference grammar of the distribution project (docker pull), as one pattern:
// [domain[:port]/]path[:tag][@algorithm:hex]. Path components are lower case.
const DOMAIN_COMPONENT = '(?:[a-zA-Z0-9]|[a-zA-Z0-9][a-zA-Z0-9-]*[a-zA-Z0-9])';
const DOMAIN = `(?:${DOMAIN_COMPONENT}(?:\\.${DOMAIN_COMPONENT})*|\\[[0-9a-fA-F:]+\\])(?::[0-9]+)?`;
const PATH_COMPONENT = '[a-z0-9]+(?:(?:[_.]|__|-+)[a-z0-9]+)*';
const IMAGE_NAME = `(?:${DOMAIN}/)?${PATH_COMPONENT}(?:/${PATH_COMPONENT})*`;
const TAG = '[\\w][\\w.-]{0,127}';
const DIGEST = '[A-Za-z][A-Za-z0-9]*(?:[-_+.][A-Za-z][A-Za-z0-9]*)*:[0-9a-fA-F]{32,}';
const IMAGE_REFERENCE = new RegExp(`^(${IMAGE_NAME})(?::${TAG})?(?:@${DIGEST})?$`);

/** Why `image` is not a container image reference, or undefined when it is one. */
export function imageReferenceProblem(image: string): string | undefined {
  if (image.length === 0) return 'must not be empty';
  if (image.length > MAX_IMAGE_REFERENCE_LENGTH) {
    return `must be at most ${MAX_IMAGE_REFERENCE_LENGTH} characters, got ${image.length}`;
  }
  const match = IMAGE_REFERENCE.exec(image);
  if (match === null) {
    return 'is not an image reference like "registry.example.com:5000/team/trainer:1.2" or "ubuntu@sha256:<64 hex digits>" (repository paths are lower case)';
  }
  const name = match[1] ?? '';
  if (name.length > MAX_IMAGE_NAME_LENGTH) {
    return `has a repository name of ${name.length} characters; at most ${MAX_IMAGE_NAME_LENGTH}`;
  }
  return undefined;
}

/** A size string for shards: absolute only. */
function checkShardSize(check: InputCheck, field: string, value: string): number {
  if (value.includes('%')) {
    check.problem(
      field,
      'percentages are not accepted for shards: a shard may land on GPUs of different sizes; give an absolute size like "12g"',
    );
    return 0;
  }
  return check.size(field, value);
}

export function checkMemoryPerGpu(field: string, value: string): number {
  const check = new InputCheck();
  const bytes = checkShardSize(check, field, value);
  check.done();
  return bytes;
}

function checkModelTerms(check: InputCheck, field: string, terms: readonly string[]): string[] {
  if (terms.length > MAX_MODEL_TERMS) {
    check.problem(field, `at most ${MAX_MODEL_TERMS} terms, got ${terms.length}`);
    return [];
  }
  terms.forEach((term, i) => check.name(`${field}[${i}]`, term, GPU_MODEL_NAME));
  return [...new Set(terms)];
}

function checkSelector(
  check: InputCheck,
  field: string,
  labels: readonly { key: string; value: string }[],
): Record<string, string> {
  const selector: Record<string, string> = {};
  if (labels.length > MAX_SELECTOR_LABELS) {
    check.problem(field, `at most ${MAX_SELECTOR_LABELS} labels, got ${labels.length}`);
    return selector;
  }
  labels.forEach(({ key, value }, i) => {
    if (!LABEL_KEY.test(key)) {
      check.problem(
        `${field}[${i}].key`,
        'label keys are 1 to 128 of A-Z a-z 0-9 . _ / -, starting with a letter or digit',
      );
    } else if (Object.hasOwn(selector, key)) {
      check.problem(`${field}[${i}].key`, `"${key}" is given twice`);
    }
    if (value.length > MAX_LABEL_VALUE_LENGTH || CONTROL_CHARACTER.test(value)) {
      check.problem(
        `${field}[${i}].value`,
        `must be at most ${MAX_LABEL_VALUE_LENGTH} characters, without control characters`,
      );
    } else if (LONE_SURROGATE.test(value)) {
      check.problem(`${field}[${i}].value`, NOT_UNICODE);
    }
    selector[key] = value;
  });
  return selector;
}

function checkEnv(
  check: InputCheck,
  field: string,
  entries: readonly EnvVarInput[],
): Record<string, string> {
  const env: Record<string, string> = {};
  let syntaxOk = true;
  entries.forEach(({ name, value }, i) => {
    if (LONE_SURROGATE.test(value)) check.problem(`${field}[${i}].value`, NOT_UNICODE);
    if (name.length === 0 || name.length > MAX_ENV_KEY_LENGTH) {
      check.problem(`${field}[${i}].name`, `must be 1 to ${MAX_ENV_KEY_LENGTH} characters long`);
      syntaxOk = false;
    } else if (Object.hasOwn(env, name)) {
      check.problem(`${field}[${i}].name`, `"${name}" is given twice`);
      syntaxOk = false;
    }
    env[name] = entries[i]!.value;
  });
  if (!syntaxOk) return env;
  const reserved = findReservedEnvKeys(env);
  const parsed = userEnvSchema.safeParse(env);
  if (!parsed.success) {
    const messages = new Set(parsed.error.issues.map((issue) => issue.message));
    for (const message of messages) check.problem(field, message);
  } else if (reserved.length > 0) {
    // userEnvSchema refuses these too; kept for a schema that stops checking them.
    check.problem(field, `reserved environment variables cannot be set: ${reserved.join(', ')}`);
  }
  return env;
}

/**
 * Secret env: the same rules as env, no name in both, and both together within what the
 * agent's launch spec accepts (they reach the container as one environment).
 */
function checkSecretEnv(
  check: InputCheck,
  entries: readonly EnvVarInput[],
  env: Readonly<Record<string, string>>,
): Record<string, string> {
  if (entries.length === 0) return {};
  const secretEnv = checkEnv(check, 'input.secretEnv', entries);
  let clash = false;
  entries.forEach(({ name }, i) => {
    if (Object.hasOwn(env, name)) {
      check.problem(
        `input.secretEnv[${i}].name`,
        `"${name}" is also in input.env: give each variable once, as plain or as secret`,
      );
      clash = true;
    }
  });
  if (!clash && !check.hasProblems()) {
    const parsed = userEnvSchema.safeParse({ ...env, ...secretEnv });
    if (!parsed.success) {
      for (const message of new Set(parsed.error.issues.map((issue) => issue.message))) {
        check.problem('input.secretEnv', `with input.env: ${message}`);
      }
    }
  }
  return secretEnv;
}

function checkCommand(check: InputCheck, field: string, command: readonly string[]): string[] {
  if (command.length === 0) return [];
  command.forEach((argument, i) => {
    if (LONE_SURROGATE.test(argument)) check.problem(`${field}[${i}]`, NOT_UNICODE);
  });
  const parsed = shardLaunchSpecSchema.shape.command.safeParse(command);
  if (!parsed.success) {
    for (const message of new Set(parsed.error.issues.map((issue) => issue.message))) {
      check.problem(field, message);
    }
  }
  return [...command];
}

/** The placement half of an input; problems go to `check`. */
function checkPlacement(check: InputCheck, input: PlacementInput): PlacementRequestInput {
  const bytesPerGpu = bytes(checkShardSize(check, 'input.memoryPerGpu', input.memoryPerGpu));
  const gpuCount = check.integer('input.gpuCount', input.gpuCount ?? 1, 1, MAX_GPUS_PER_HOST);
  return {
    bytesPerGpu,
    gpuCount,
    gpuModel: {
      include: checkModelTerms(check, 'input.gpuModelInclude', input.gpuModelInclude ?? []),
      exclude: checkModelTerms(check, 'input.gpuModelExclude', input.gpuModelExclude ?? []),
    },
    hostSelector: checkSelector(check, 'input.hostSelector', input.hostSelector ?? []),
    policy: input.placementPolicy ?? 'BINPACK',
    compute: checkComputeInput(check, 'input', input.computeSharePercent, input.computeMode),
  };
}

/** placementPreview's input, checked; BAD_USER_INPUT with every problem. */
export function checkPlacementInput(input: PlacementInput): PlacementRequestInput {
  const check = new InputCheck();
  const request = checkPlacement(check, input);
  check.done();
  return request;
}

/** createShard's input, checked before anything is read or written; BAD_USER_INPUT otherwise. */
export function checkCreateShardInput(input: CreateShardInput): ShardRequest {
  const check = new InputCheck();
  check.name('input.name', input.name, SHARD_NAME);
  const imageProblem = imageReferenceProblem(input.image);
  if (imageProblem !== undefined) check.problem('input.image', imageProblem);
  const placement = checkPlacement(check, input);
  const command = checkCommand(check, 'input.command', input.command ?? []);
  const env = checkEnv(check, 'input.env', input.env ?? []);
  const secretEnv = checkSecretEnv(check, input.secretEnv ?? [], env);
  const key = input.idempotencyKey ?? null;
  if (
    key !== null &&
    (key.length > MAX_IDEMPOTENCY_KEY_LENGTH || key.length === 0 || !PRINTABLE_ASCII.test(key))
  ) {
    check.problem(
      'input.idempotencyKey',
      `must be 1 to ${MAX_IDEMPOTENCY_KEY_LENGTH} printable ASCII characters (no spaces)`,
    );
  }
  const priorityClass = input.priorityClass ?? DEFAULT_PRIORITY_CLASS;
  if (PRIORITY_CLASSES.get(priorityClass) === undefined) {
    check.problem(
      'input.priorityClass',
      `must be one of ${PRIORITY_CLASSES.list.map((c) => `"${c.name}"`).join(', ')}, got "${priorityClass}"`,
    );
  }
  const maxWaitSeconds = input.maxWaitSeconds ?? null;
  if (maxWaitSeconds !== null) {
    check.integer('input.maxWaitSeconds', maxWaitSeconds, 1, MAX_WAIT_SECONDS);
  }
  check.done();
  return {
    ...placement,
    name: input.name,
    image: input.image,
    command,
    env,
    secretEnv,
    idempotencyKey: key,
    queue: input.queue ?? true,
    priorityClass,
    maxWaitSeconds,
    requeue: input.requeue ?? true,
    elastic: input.elastic ?? false,
  };
}
