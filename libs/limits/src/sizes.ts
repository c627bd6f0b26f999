/**
 * Sizes of GPU memory: what people type, what people read, and what the interposer reads.
 *
 * Grammar (case-insensitive, surrounding whitespace ignored, a space allowed before the unit):
 *
 *   size    := number [unit] | number "%"
 *   number  := digits ["." digits]
 *   unit    := "b" | "k" | "m" | "g" | "t" | "kib" | "mib" | "gib" | "tib"
 *
 * Every unit is 1024-based, as CUDA_DEVICE_MEMORY_LIMIT reads it ("12g" = 12 × 2^30 bytes).
 * "kb", "mb", "gb" and "tb" are refused: people mean 10^9 by "GB" as often as 2^30, and a
 * shard that is 7% smaller than asked for is a bug report. A fraction that does not land
 * on a whole byte is rounded down to whole bytes (the error is under one byte).
 *
 * formatSize, for people, rounds down to two decimals; formatSizeExact, for the interposer,
 * writes the exact integer.
 */

/** A whole number of bytes from 0 to 2^53 − 1 (Number.MAX_SAFE_INTEGER). */
export type Bytes = number & { readonly __brand: 'Bytes' };

export const MAX_BYTES = Number.MAX_SAFE_INTEGER as Bytes;

export function isBytes(value: unknown): value is Bytes {
  return typeof value === 'number' && Number.isSafeInteger(value) && value >= 0;
}

/** Brands a number as Bytes, refusing fractions, negatives and anything past 2^53 − 1. */
export function bytes(value: number): Bytes {
  if (!isBytes(value)) {
    throw new RangeError(`not a byte count: ${value} (must be a whole number from 0 to 2^53 − 1)`);
  }
  return value;
}

/**
 * For sums and products shown to people or compared against limits: floors, and clamps to
 * 0..MAX_BYTES. A clamped value is past anything a GPU or a quota can hold, so a comparison
 * against a real limit comes out the same.
 */
export function clampBytes(value: number): Bytes {
  return Math.min(Math.max(Math.floor(value), 0), MAX_BYTES) as Bytes;
}

export const KiB = bytes(2 ** 10);
export const MiB = bytes(2 ** 20);
export const GiB = bytes(2 ** 30);
export const TiB = bytes(2 ** 40);

export type SizeErrorCode =
  | 'EMPTY'
  | 'MALFORMED'
  | 'NOT_A_NUMBER'
  | 'NEGATIVE'
  | 'UNKNOWN_UNIT'
  | 'AMBIGUOUS_UNIT'
  | 'PERCENT_WITHOUT_GPU'
  | 'PERCENT_OUT_OF_RANGE'
  | 'ZERO'
  | 'TOO_LARGE';

export interface SizeError {
  readonly code: SizeErrorCode;
  readonly message: string;
}

export type SizeParseResult =
  { readonly ok: true; readonly bytes: Bytes } | { readonly ok: false; readonly error: SizeError };

export interface SizeParseContext {
  /** Total memory of the GPU a percentage refers to. */
  readonly gpuTotalBytes?: Bytes;
}

export class SizeParseError extends Error {
  readonly code: SizeErrorCode;

  constructor(error: SizeError) {
    super(error.message);
    this.name = 'SizeParseError';
    this.code = error.code;
  }
}

/** Longer input is refused before any arithmetic; the largest valid size needs 16 digits. */
const MAX_INPUT_LENGTH = 64;

const EXAMPLES = 'like 12g, 1536m, 12GiB, 1073741824 or 50%';

const UNIT_FACTORS: ReadonlyMap<string, bigint> = new Map([
  ['', 1n],
  ['b', 1n],
  ['k', 1n << 10n],
  ['kib', 1n << 10n],
  ['m', 1n << 20n],
  ['mib', 1n << 20n],
  ['g', 1n << 30n],
  ['gib', 1n << 30n],
  ['t', 1n << 40n],
  ['tib', 1n << 40n],
]);

/** Decimal-looking units, refused; the value is the letter that means the 1024-based unit. */
const AMBIGUOUS_UNITS: ReadonlyMap<string, string> = new Map([
  ['kb', 'k'],
  ['mb', 'm'],
  ['gb', 'g'],
  ['tb', 't'],
]);

const SIZE_SHAPE = /^(-?)(\d+)(?:\.(\d+))?\s*([a-z]*|%)$/i;
const NOT_A_NUMBER = /^[+-]?(nan|infinity|inf)$/i;

function fail(code: SizeErrorCode, message: string): SizeParseResult {
  return { ok: false, error: { code, message } };
}

/** Parses a size as people type it; see the grammar at the top of this file. */
export function parseSize(input: string, context: SizeParseContext = {}): SizeParseResult {
  const text = input.trim();
  if (text === '') return fail('EMPTY', 'size is empty: give a size ' + EXAMPLES);
  if (text.length > MAX_INPUT_LENGTH) {
    return fail(
      'MALFORMED',
      `size is ${text.length} characters long; sizes have at most ${MAX_INPUT_LENGTH}`,
    );
  }
  const shape = SIZE_SHAPE.exec(text);
  if (shape === null) {
    if (NOT_A_NUMBER.test(text)) {
      return fail('NOT_A_NUMBER', `"${text}" is not a number: give a size ${EXAMPLES}`);
    }
    return fail(
      'MALFORMED',
      `"${text}" is not a size: expected a number with an optional unit, ${EXAMPLES}`,
    );
  }
  const [, sign = '', whole = '', fraction = '', rawUnit = ''] = shape;
  // The fraction is kept as an exact ratio so that "1.5g" is 1610612736 bytes, not a float.
  const numerator = BigInt(whole + fraction);
  const denominator = 10n ** BigInt(fraction.length);
  if (sign === '-' && numerator !== 0n) {
    return fail('NEGATIVE', `"${text}" is negative: a size must be more than zero`);
  }
  const unit = rawUnit.toLowerCase();
  if (unit === '%') return parsePercent(text, numerator, denominator, context);
  const ambiguous = AMBIGUOUS_UNITS.get(unit);
  if (ambiguous !== undefined) {
    const number = fraction === '' ? whole : `${whole}.${fraction}`;
    const binary = `${unit.charAt(0).toUpperCase()}iB`;
    return fail(
      'AMBIGUOUS_UNIT',
      `"${text}" is ambiguous: "${rawUnit}" may mean 1000- or 1024-based; ` +
        `write ${number}${ambiguous} or ${number}${binary} (1024-based)`,
    );
  }
  const factor = UNIT_FACTORS.get(unit);
  if (factor === undefined) {
    return fail(
      'UNKNOWN_UNIT',
      `unknown unit "${rawUnit}" in "${text}": use b, k, m, g, t or KiB, MiB, GiB, TiB (all 1024-based)`,
    );
  }
  return checkRange(text, (numerator * factor) / denominator);
}

function parsePercent(
  text: string,
  numerator: bigint,
  denominator: bigint,
  context: SizeParseContext,
): SizeParseResult {
  if (context.gpuTotalBytes === undefined) {
    return fail(
      'PERCENT_WITHOUT_GPU',
      `"${text}" is a share of a GPU, but no GPU is known here: give an absolute size like 40g`,
    );
  }
  if (numerator > 100n * denominator) {
    return fail('PERCENT_OUT_OF_RANGE', `"${text}" is more than the whole GPU: give 100% or less`);
  }
  return checkRange(text, (numerator * BigInt(context.gpuTotalBytes)) / (100n * denominator));
}

function checkRange(text: string, value: bigint): SizeParseResult {
  if (value === 0n) {
    return fail('ZERO', `"${text}" is zero bytes: a size must be at least 1 byte`);
  }
  if (value > BigInt(MAX_BYTES)) {
    return fail(
      'TOO_LARGE',
      `"${text}" is past the largest size, ${MAX_BYTES} bytes (2^53 − 1, just under 8 PiB)`,
    );
  }
  return { ok: true, bytes: bytes(Number(value)) };
}

/** parseSize for callers that treat a bad size as an exception; throws SizeParseError. */
export function parseSizeOrThrow(input: string, context: SizeParseContext = {}): Bytes {
  const result = parseSize(input, context);
  if (!result.ok) throw new SizeParseError(result.error);
  return result.bytes;
}

const DISPLAY_UNITS: readonly { readonly name: string; readonly size: Bytes }[] = [
  { name: 'TiB', size: TiB },
  { name: 'GiB', size: GiB },
  { name: 'MiB', size: MiB },
  { name: 'KiB', size: KiB },
];

/** A size as shown: a whole number of hundredths of a unit. */
interface Display {
  readonly hundredths: number;
  readonly name: string;
  readonly size: number;
}

/** Rounds down, exactly: a unit is a power of two, so size / unit and its remainder are exact. */
function display(size: Bytes): Display {
  for (const unit of DISPLAY_UNITS) {
    if (size < unit.size) continue;
    const whole = Math.floor(size / unit.size);
    const rest = size - whole * unit.size;
    const hundredths = whole * 100 + Math.floor((rest * 100) / unit.size);
    return { hundredths, name: unit.name, size: unit.size };
  }
  return { hundredths: size * 100, name: 'B', size: 1 };
}

/** Two decimals without trailing zeros: 50 → "5", 5 → "05", 0 → "". */
function decimals(hundredths: number): string {
  if (hundredths === 0) return '';
  if (hundredths % 10 === 0) return String(hundredths / 10);
  return hundredths < 10 ? `0${hundredths}` : String(hundredths);
}

/**
 * For people: the largest unit that keeps the number at 1 or more, up to two decimals,
 * trailing zeros trimmed ("12 GiB", "1.5 GiB", "512 MiB", "100 B"). Rounds down, so a
 * size shown is never more than the real one: 12 GiB less one byte is "11.99 GiB".
 */
export function formatSize(size: Bytes): string {
  const { hundredths, name } = display(size);
  const fraction = decimals(hundredths % 100);
  const whole = Math.floor(hundredths / 100);
  return fraction === '' ? `${whole} ${name}` : `${whole}.${fraction} ${name}`;
}

/**
 * True when parseSize(formatSize(size)) = size: every size under 1 KiB, and every multiple
 * of a quarter of its display unit ("1.25 GiB"). Two decimals hold n/4 exactly and no other
 * fraction of a power of two, so every other size is shown rounded down.
 */
export function formatSizeIsExact(size: Bytes): boolean {
  const unit = display(size).size;
  return unit === 1 || size % (unit / 4) === 0;
}

/** For the interposer's environment: the exact byte count, never rounded. */
export function formatSizeExact(size: Bytes): string {
  return String(bytes(size));
}
