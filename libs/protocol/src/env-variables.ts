import type { z } from 'zod';

/** What reading a schema's variables from the environment gave. */
export interface EnvVariables<T> {
  /** The schema's variables that are set (an empty value counts as unset). */
  readonly present: Readonly<Record<string, string>>;
  /** The parsed values; undefined when a variable is wrong. */
  readonly values: T | undefined;
  /** One line per wrong variable: what is wrong, and the value given (secrets hidden). */
  readonly problems: string[];
}

export interface EnvVariableOptions {
  /** Variables whose values never appear in a problem (passwords, keys, tokens). */
  readonly secret?: ReadonlySet<string>;
  /** For a required variable that is unset: what it is, or where to read about it. */
  readonly requiredHint?: (name: string) => string;
}

/**
 * Reads the variables `schema` names from `env` (the agent's and the control plane's
 * GPUSHARDS_* settings), so that every app words a bad setting the same way:
 * `NAME <what is wrong>, got "<value>"`, or `NAME is required (<hint>)`.
 */
export function readEnvVariables<S extends z.ZodObject>(
  schema: S,
  env: NodeJS.ProcessEnv,
  options: EnvVariableOptions = {},
): EnvVariables<z.output<S>> {
  const present = Object.fromEntries(
    Object.keys(schema.shape).flatMap((key) => {
      const value = env[key];
      return value === undefined || value === '' ? [] : [[key, value] as const];
    }),
  );
  const parsed = schema.safeParse(present);
  if (parsed.success) return { present, values: parsed.data, problems: [] };
  const problems = parsed.error.issues.map((issue) => {
    const name = issue.path.map(String).join('.');
    if (name === '') return issue.message;
    const value = present[name];
    if (value === undefined) {
      const hint = options.requiredHint?.(name);
      return `${name} is required${hint === undefined ? '' : ` (${hint})`}`;
    }
    return `${name} ${issue.message}, got ${options.secret?.has(name) ? '(hidden)' : JSON.stringify(value)}`;
  });
  return { present, values: undefined, problems };
}
