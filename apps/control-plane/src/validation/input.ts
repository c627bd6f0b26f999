import { BadUserInputError, type FieldProblem } from '../errors/domain-errors.js';
import { parseSize } from './sizes.js';

/**
 * Input checks that run before anything is written. Problems are collected per field and
 * thrown together as one BAD_USER_INPUT, so a form can show all of them at once. Messages
 * never echo long input back.
 */
export class InputCheck {
  private readonly problems: FieldProblem[] = [];

  problem(field: string, message: string): void {
    this.problems.push({ field, message });
  }

  hasProblems(): boolean {
    return this.problems.length > 0;
  }

  /** Throws BAD_USER_INPUT with every problem found so far, if any. */
  done(): void {
    if (this.problems.length > 0) throw new BadUserInputError(this.problems);
  }

  name(field: string, value: string, rule: NameRule): string {
    if (value.length < 1 || value.length > rule.maxLength) {
      this.problem(field, `must be 1 to ${rule.maxLength} characters long, got ${value.length}`);
    } else if (!rule.pattern.test(value)) {
      this.problem(field, `may contain ${rule.allowed}`);
    }
    return value;
  }

  /** A size as people type it ("48g", "1536m"); `allowZero` for limits where 0 means none. */
  size(field: string, value: string, { allowZero = false } = {}): number {
    const parsed = parseSize(value);
    if (parsed.ok) return parsed.bytes;
    if (parsed.zero && allowZero) return 0;
    this.problem(field, parsed.message);
    return 0;
  }

  integer(field: string, value: number, min: number, max: number): number {
    if (!Number.isInteger(value) || value < min || value > max) {
      this.problem(field, `must be a whole number from ${min} to ${max}, got ${value}`);
    }
    return value;
  }
}

export interface NameRule {
  readonly maxLength: number;
  readonly pattern: RegExp;
  /** Completes "may contain ...". */
  readonly allowed: string;
}

/** Team names end up in metrics labels, log fields and container labels: DNS-label shaped. */
export const TEAM_NAME: NameRule = {
  maxLength: 63,
  pattern: /^[a-z0-9](?:[a-z0-9-]*[a-z0-9])?$/,
  allowed:
    'only lower-case letters, digits and hyphens, and must start and end with a letter or digit (like "ml-research")',
};

/** Free text for people, without control characters or markup. */
export const DISPLAY_NAME: NameRule = {
  maxLength: 100,
  pattern: /^[\p{L}\p{N}](?:[\p{L}\p{N} ._:@/()+-]*[\p{L}\p{N}._)])?$/u,
  allowed:
    'letters, digits, spaces and . _ : @ / ( ) + -, and must start with a letter or digit and not end with a space',
};

/** GPU model names as NVML reports them ("NVIDIA H100 80GB HBM3"). */
export const GPU_MODEL_NAME: NameRule = {
  maxLength: 128,
  pattern: /^[\p{L}\p{N}](?:[\p{L}\p{N} ._()+-]*[\p{L}\p{N})])?$/u,
  allowed: 'letters, digits, spaces and . _ ( ) + -',
};

const UUID = /^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$/i;

/** Ids are UUIDs; anything else is refused before it reaches a uuid column. */
export function checkId(field: string, value: string): string {
  if (!UUID.test(value)) throw BadUserInputError.of(field, 'is not an id of this API (a UUID)');
  return value.toLowerCase();
}
