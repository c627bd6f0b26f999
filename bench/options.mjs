// A bench's command line: node:util's parseArgs, strict, with --help (the script's opening
// comment, each option with its default, an example) and a one-line error for an unknown
// option or a bad value instead of parseArgs' raw exception.
import { readFileSync, writeSync } from 'node:fs';
import { basename } from 'node:path';
import { fileURLToPath } from 'node:url';
import { parseArgs } from 'node:util';

/**
 * What an option's value must be, checked before the bench starts:
 * - count: a whole number from 1; whole: a whole number from 0; number: a number from 0;
 * - counts: whole numbers from 0, comma-separated; list: texts, comma-separated;
 * - one of `choices` (with `list: true`, several of them, comma-separated);
 * - anything else (a path, a label): any text.
 */
const CHECKS = {
  count: { meta: 'N', ok: (v) => /^\d+$/.test(v) && Number(v) >= 1, says: 'a whole number from 1' },
  whole: { meta: 'N', ok: (v) => /^\d+$/.test(v), says: 'a whole number from 0' },
  number: {
    meta: 'N',
    ok: (v) => /^\d+(\.\d+)?$/.test(v),
    says: 'a number from 0 (digits, a decimal point)',
  },
  counts: {
    meta: 'N,N,…',
    ok: (v) => v.split(',').every((n) => /^\d+$/.test(n)),
    says: 'whole numbers from 0, comma-separated',
  },
  list: { meta: 'A,B,…', ok: (v) => v.split(',').every((t) => t !== ''), says: 'a comma list' },
};

class UsageError extends Error {}

/**
 * Parses process.argv for the bench at `scriptUrl` (its import.meta.url). `options`: parseArgs'
 * options, each with `help` (one line), optionally `value` (a CHECKS kind), `choices`, `list`
 * (with choices), `meta` (the value's name in the help) or `internal` (the bench's own child
 * processes pass it; left out of the help). `positionals`: in order, each `{ name, help,
 * default?, choices? }`, returned among the values by name. `example`: a command line. On
 * --help prints the help and exits 0; on a bad command line prints one line and exits 2.
 * Resolves to the values as parseArgs gives them (strings and booleans, defaults filled in).
 */
export function benchOptions(scriptUrl, { options, positionals = [], example }) {
  const script = fileURLToPath(scriptUrl);
  const name = basename(script);
  try {
    const parsed = parseArgs({
      options: {
        ...Object.fromEntries(
          Object.entries(options).map(([key, spec]) => [key, parseArgsSpec(spec)]),
        ),
        help: { type: 'boolean', default: false },
      },
      allowPositionals: positionals.length > 0,
      strict: true,
    });
    if (parsed.values.help) {
      // Written at once: process.exit would cut a write to a pipe short.
      writeSync(1, helpText(script, options, positionals, example));
      process.exit(0);
    }
    if (parsed.positionals.length > positionals.length) {
      throw new UsageError(`unexpected argument "${parsed.positionals[positionals.length]}"`);
    }
    const values = { ...parsed.values };
    delete values.help;
    for (const [key, spec] of Object.entries(options)) {
      if (typeof values[key] === 'string') check(`--${key}`, values[key], spec);
    }
    for (const [i, spec] of positionals.entries()) {
      const value = parsed.positionals[i] ?? spec.default;
      if (value !== undefined) check(spec.name, value, spec);
      values[spec.name] = value;
    }
    return values;
  } catch (error) {
    const message = error instanceof UsageError ? error.message : parseArgsMessage(error);
    if (message === undefined) throw error;
    writeSync(2, `${name}: ${message} (--help lists the options)\n`);
    process.exit(2);
  }
}

function parseArgsSpec({ type, default: value, short, multiple }) {
  const spec = { type };
  if (value !== undefined) spec.default = value;
  if (short !== undefined) spec.short = short;
  if (multiple !== undefined) spec.multiple = multiple;
  return spec;
}

function check(label, value, spec) {
  if (spec.choices !== undefined) {
    const given = spec.list ? value.split(',') : [value];
    const wrong = given.find((v) => !spec.choices.includes(v));
    if (wrong !== undefined) {
      const of = spec.list ? 'a comma list of' : 'one of';
      throw new UsageError(`${label} takes ${of} ${spec.choices.join(', ')}, not "${wrong}"`);
    }
    return;
  }
  const kind = CHECKS[spec.value];
  if (kind !== undefined && !kind.ok(value)) {
    throw new UsageError(`${label} takes ${kind.says}, not "${value}"`);
  }
}

/** parseArgs' own errors, as one line; undefined for any other error. */
function parseArgsMessage(error) {
  const option = /'(-[^']*)'/.exec(error?.message ?? '')?.[1];
  switch (error?.code) {
    case 'ERR_PARSE_ARGS_UNKNOWN_OPTION':
      return `unknown option ${option ?? ''}`.trim();
    case 'ERR_PARSE_ARGS_INVALID_OPTION_VALUE': {
      const flag = option?.split(' ')[0] ?? 'an option';
      if (/does not take/.test(error.message)) return `${flag} takes no value`;
      if (/ambiguous/.test(error.message))
        return `${flag} needs a value (one starting with "-" as ${flag}=VALUE)`;
      return `${flag} needs a value`;
    }
    case 'ERR_PARSE_ARGS_UNEXPECTED_POSITIONAL':
      return `unexpected argument "${/'([^']*)'/.exec(error.message)?.[1] ?? ''}"`;
    default:
      return undefined;
  }
}

/** The opening comment (what the bench measures), the options and their defaults, an example. */
function helpText(script, options, positionals, example) {
  const lines = readFileSync(script, 'utf8')
    .split('\n')
    .filter((line, i) => i > 0 || !line.startsWith('#!'));
  const end = lines.findIndex((line) => !line.startsWith('//'));
  const about = lines
    .slice(0, end === -1 ? lines.length : end)
    .map((l) => l.replace(/^\/\/ ?/, ''));
  const rows = [];
  for (const spec of positionals) {
    rows.push([
      spec.choices ? spec.choices.join('|') : spec.name.toUpperCase(),
      spec.help,
      spec.default,
    ]);
  }
  for (const [key, spec] of Object.entries(options)) {
    if (spec.internal) continue;
    const meta =
      spec.type === 'boolean'
        ? ''
        : ` ${spec.meta ?? (spec.choices ? spec.choices.join(spec.list ? ',' : '|') : (CHECKS[spec.value]?.meta ?? 'TEXT'))}`;
    const fallback = spec.type === 'boolean' ? 'off' : undefined;
    rows.push([
      `--${key}${meta}`,
      spec.help,
      spec.default === false ? 'off' : (spec.default ?? fallback),
    ]);
  }
  rows.push(['--help', 'this text', undefined]);
  const width = Math.min(32, Math.max(...rows.map(([left]) => left.length)) + 2);
  const table = rows.map(([left, help, value]) => {
    const text = value === undefined || value === '' ? help : `${help} (default: ${value})`;
    return left.length + 2 > width
      ? `  ${left}\n  ${' '.repeat(width)}${text}`
      : `  ${left.padEnd(width)}${text}`;
  });
  return [
    ...about,
    '',
    positionals.length > 0 ? 'Arguments and options:' : 'Options:',
    ...table,
    '',
    'Example:',
    `  ${example}`,
    '',
  ].join('\n');
}

/**
 * --dists and --labels, for the benches that compare builds side by side: `defaultDist` is this
 * tree's build, `what` says of what (the control plane's, libs/limits').
 */
export function buildOptions(defaultDist, what) {
  return {
    dists: {
      type: 'string',
      default: defaultDist,
      value: 'list',
      help: `the builds to compare: ${what} dist folders, comma-separated`,
    },
    labels: {
      type: 'string',
      value: 'list',
      help: "the builds' names in the output (default: their folders)",
    },
  };
}
