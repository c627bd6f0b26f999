import { describe, test } from 'node:test';
import assert from 'node:assert/strict';
import fc from 'fast-check';
import {
  type Bytes,
  bytes,
  clampBytes,
  formatSize,
  formatSizeExact,
  formatSizeIsExact,
  GiB,
  KiB,
  MAX_BYTES,
  MiB,
  parseSize,
  parseSizeOrThrow,
  SizeParseError,
  type SizeErrorCode,
  TiB,
} from './sizes.js';

const anyBytes = fc.integer({ min: 1, max: Number.MAX_SAFE_INTEGER }).map(bytes);

function parsed(input: string, gpuTotalBytes?: Bytes): number {
  const result = parseSize(input, gpuTotalBytes === undefined ? {} : { gpuTotalBytes });
  assert.ok(result.ok, `expected "${input}" to parse, got ${JSON.stringify(result)}`);
  return result.bytes;
}

function refusal(input: string, gpuTotalBytes?: Bytes): { code: SizeErrorCode; message: string } {
  const result = parseSize(input, gpuTotalBytes === undefined ? {} : { gpuTotalBytes });
  assert.ok(!result.ok, `expected "${input}" to be refused, got ${JSON.stringify(result)}`);
  return result.error;
}

describe('parseSize accepts', () => {
  test('plain bytes', () => {
    assert.equal(parsed('1073741824'), GiB);
    assert.equal(parsed('1'), 1);
  });

  test('k/m/g/t suffixes, 1024-based and case-insensitive, as CUDA_DEVICE_MEMORY_LIMIT takes them', () => {
    assert.equal(parsed('4096m'), 4 * GiB);
    assert.equal(parsed('1536m'), 1536 * MiB);
    assert.equal(parsed('12g'), 12 * GiB);
    assert.equal(parsed('12G'), 12 * GiB);
    assert.equal(parsed('3k'), 3 * KiB);
    assert.equal(parsed('2T'), 2 * TiB);
    assert.equal(parsed('100b'), 100);
  });

  test('KiB/MiB/GiB/TiB in any case, with or without a space', () => {
    assert.equal(parsed('12GiB'), 12 * GiB);
    assert.equal(parsed('12 gib'), 12 * GiB);
    assert.equal(parsed('512 MiB'), 512 * MiB);
    assert.equal(parsed('1 KIB'), KiB);
    assert.equal(parsed('1tib'), TiB);
    assert.equal(parsed('  8g  '), 8 * GiB);
  });

  test('decimal fractions, exactly, rounding down to whole bytes only where needed', () => {
    assert.equal(parsed('1.5g'), 1.5 * GiB);
    assert.equal(parsed('0.25GiB'), 256 * MiB);
    assert.equal(parsed('1.1g'), Math.floor(1.1 * 2 ** 30));
    assert.equal(parsed('1.5'), 1);
    assert.equal(parsed('000012g'), 12 * GiB);
  });

  test('a percentage of a known GPU, rounded down to whole bytes', () => {
    assert.equal(parsed('50%', bytes(80 * GiB)), 40 * GiB);
    assert.equal(parsed('100%', bytes(80 * GiB)), 80 * GiB);
    assert.equal(parsed('12.5%', bytes(80 * GiB)), 10 * GiB);
    assert.equal(parsed('33%', bytes(100)), 33);
    assert.equal(parsed('33.3%', bytes(10)), 3);
  });

  test('the largest size, 2^53 − 1 bytes', () => {
    assert.equal(parsed(String(Number.MAX_SAFE_INTEGER)), MAX_BYTES);
  });
});

describe('parseSize refuses, saying what was wrong', () => {
  const cases: readonly [string, SizeErrorCode, string][] = [
    ['', 'EMPTY', 'size is empty: give a size like 12g, 1536m, 12GiB, 1073741824 or 50%'],
    ['   ', 'EMPTY', 'size is empty: give a size like 12g, 1536m, 12GiB, 1073741824 or 50%'],
    [
      '1.2.3g',
      'MALFORMED',
      '"1.2.3g" is not a size: expected a number with an optional unit, like 12g, 1536m, 12GiB, 1073741824 or 50%',
    ],
    [
      '.5g',
      'MALFORMED',
      '".5g" is not a size: expected a number with an optional unit, like 12g, 1536m, 12GiB, 1073741824 or 50%',
    ],
    [
      '1e9',
      'MALFORMED',
      '"1e9" is not a size: expected a number with an optional unit, like 12g, 1536m, 12GiB, 1073741824 or 50%',
    ],
    ['1'.repeat(65), 'MALFORMED', 'size is 65 characters long; sizes have at most 64'],
    [
      'NaN',
      'NOT_A_NUMBER',
      '"NaN" is not a number: give a size like 12g, 1536m, 12GiB, 1073741824 or 50%',
    ],
    [
      '-Infinity',
      'NOT_A_NUMBER',
      '"-Infinity" is not a number: give a size like 12g, 1536m, 12GiB, 1073741824 or 50%',
    ],
    ['-5g', 'NEGATIVE', '"-5g" is negative: a size must be more than zero'],
    [
      '12xb',
      'UNKNOWN_UNIT',
      'unknown unit "xb" in "12xb": use b, k, m, g, t or KiB, MiB, GiB, TiB (all 1024-based)',
    ],
    [
      '12gb',
      'AMBIGUOUS_UNIT',
      '"12gb" is ambiguous: "gb" may mean 1000- or 1024-based; write 12g or 12GiB (1024-based)',
    ],
    [
      '12GB',
      'AMBIGUOUS_UNIT',
      '"12GB" is ambiguous: "GB" may mean 1000- or 1024-based; write 12g or 12GiB (1024-based)',
    ],
    [
      '1.5MB',
      'AMBIGUOUS_UNIT',
      '"1.5MB" is ambiguous: "MB" may mean 1000- or 1024-based; write 1.5m or 1.5MiB (1024-based)',
    ],
    [
      '50%',
      'PERCENT_WITHOUT_GPU',
      '"50%" is a share of a GPU, but no GPU is known here: give an absolute size like 40g',
    ],
    ['0', 'ZERO', '"0" is zero bytes: a size must be at least 1 byte'],
    ['-0g', 'ZERO', '"-0g" is zero bytes: a size must be at least 1 byte'],
    ['0.5b', 'ZERO', '"0.5b" is zero bytes: a size must be at least 1 byte'],
    [
      '8192t',
      'TOO_LARGE',
      '"8192t" is past the largest size, 9007199254740991 bytes (2^53 − 1, just under 8 PiB)',
    ],
    [
      '9007199254740992',
      'TOO_LARGE',
      '"9007199254740992" is past the largest size, 9007199254740991 bytes (2^53 − 1, just under 8 PiB)',
    ],
  ];
  for (const [input, code, message] of cases) {
    test(`${JSON.stringify(input)}: ${code}`, () => {
      assert.deepEqual(refusal(input), { code, message });
    });
  }

  test('a percentage over 100: PERCENT_OUT_OF_RANGE', () => {
    assert.deepEqual(refusal('150%', bytes(80 * GiB)), {
      code: 'PERCENT_OUT_OF_RANGE',
      message: '"150%" is more than the whole GPU: give 100% or less',
    });
  });

  test('a percentage that rounds down to nothing: ZERO', () => {
    assert.equal(refusal('1%', bytes(50)).code, 'ZERO');
  });
});

describe('parseSizeOrThrow', () => {
  test('returns the bytes', () => {
    assert.equal(parseSizeOrThrow('12g'), 12 * GiB);
  });

  test('throws a SizeParseError carrying the code and message', () => {
    assert.throws(
      () => parseSizeOrThrow('12gb'),
      (error: unknown) =>
        error instanceof SizeParseError &&
        error.code === 'AMBIGUOUS_UNIT' &&
        error.message.startsWith('"12gb" is ambiguous'),
    );
  });
});

describe('bytes', () => {
  test('brands whole numbers from 0 to 2^53 − 1', () => {
    assert.equal(bytes(0), 0);
    assert.equal(bytes(Number.MAX_SAFE_INTEGER), MAX_BYTES);
  });

  test('refuses fractions, negatives, NaN and anything past 2^53 − 1', () => {
    for (const bad of [1.5, -1, Number.NaN, Infinity, 2 ** 53]) {
      assert.throws(() => bytes(bad), RangeError, String(bad));
    }
  });

  test('clampBytes floors and saturates', () => {
    assert.equal(clampBytes(2 ** 60), MAX_BYTES);
    assert.equal(clampBytes(-3), 0);
    assert.equal(clampBytes(7.9), 7);
  });
});

describe('formatSize', () => {
  test('writes what people read', () => {
    assert.equal(formatSize(bytes(12 * GiB)), '12 GiB');
    assert.equal(formatSize(bytes(1.5 * GiB)), '1.5 GiB');
    assert.equal(formatSize(bytes(512 * MiB)), '512 MiB');
    assert.equal(formatSize(KiB), '1 KiB');
    assert.equal(formatSize(bytes(100)), '100 B');
    assert.equal(formatSize(bytes(0)), '0 B');
    assert.equal(formatSize(bytes(1234567)), '1.17 MiB');
    assert.equal(formatSize(bytes(2 * TiB)), '2 TiB');
    assert.equal(formatSize(bytes(1076 * MiB)), '1.05 GiB');
    assert.equal(formatSize(bytes(10 * GiB + 11 * MiB)), '10.01 GiB');
    assert.equal(formatSize(MAX_BYTES), '8191.99 TiB');
  });

  test('formatSizeIsExact: bytes and quarters of the display unit', () => {
    assert.equal(formatSizeIsExact(bytes(1.25 * GiB)), true);
    assert.equal(formatSizeIsExact(bytes(1000)), true);
    assert.equal(formatSizeIsExact(bytes(1181116006)), false);
    assert.equal(formatSizeIsExact(bytes(768 * MiB)), true);
    assert.equal(formatSizeIsExact(bytes(1234567)), false);
    assert.equal(formatSizeIsExact(bytes(GiB - 1)), false);
  });

  test('rounds down, never showing more than there is', () => {
    assert.equal(formatSize(bytes(GiB - 1)), '1023.99 MiB');
    assert.equal(formatSize(bytes(12 * GiB - 1)), '11.99 GiB');
    assert.equal(formatSize(bytes(KiB - 1)), '1023 B');
  });

  test('formatSizeExact writes the exact integer', () => {
    assert.equal(formatSizeExact(bytes(12 * GiB)), '12884901888');
    assert.equal(formatSizeExact(MAX_BYTES), '9007199254740991');
  });
});

describe('round trips (properties)', () => {
  test('parseSize(formatSizeExact(x)) = x for every x from 1 to 2^53 − 1', () => {
    fc.assert(
      fc.property(anyBytes, (x) => parsed(formatSizeExact(x)) === x),
      { numRuns: 1000 },
    );
  });

  test('parseSize(formatSize(x)) = x whenever formatSizeIsExact(x)', () => {
    const quarterMultiples = fc
      .tuple(fc.constantFrom(KiB, MiB, GiB, TiB), fc.integer({ min: 4, max: 4095 }))
      .map(([unit, quarters]) => bytes((unit / 4) * quarters));
    fc.assert(
      fc.property(fc.oneof(quarterMultiples, anyBytes), (x) => {
        if (!formatSizeIsExact(x)) return true;
        return parsed(formatSize(x)) === x;
      }),
      { numRuns: 1000 },
    );
    fc.assert(
      fc.property(quarterMultiples, (x) => formatSizeIsExact(x)),
      { numRuns: 200 },
    );
  });

  test('formatSizeIsExact(x) says exactly whether the round trip keeps every byte', () => {
    fc.assert(
      fc.property(anyBytes, (x) => formatSizeIsExact(x) === (parsed(formatSize(x)) === x)),
      { numRuns: 1000 },
    );
  });

  test('parseSize(formatSize(x)) is at most x and within a hundredth of the display unit', () => {
    fc.assert(
      fc.property(anyBytes, (x) => {
        const lost = x - parsed(formatSize(x));
        return lost >= 0 && lost <= x / 100;
      }),
      { numRuns: 1000 },
    );
  });

  test('units are case-insensitive', () => {
    const unit = fc.constantFrom('k', 'm', 'g', 't', 'kib', 'mib', 'gib', 'tib', 'b');
    const mixedCase = fc
      .tuple(unit, fc.array(fc.boolean(), { minLength: 3, maxLength: 3 }))
      .map(([u, upper]) =>
        [...u].map((c, i) => (upper[i] === true ? c.toUpperCase() : c)).join(''),
      );
    fc.assert(
      fc.property(fc.integer({ min: 1, max: 1000 }), mixedCase, (n, u) => {
        return parsed(`${n}${u}`) === parsed(`${n}${u.toLowerCase()}`);
      }),
      { numRuns: 300 },
    );
  });
});
