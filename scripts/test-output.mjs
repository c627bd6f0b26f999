// Reading the test runners' output: the counts of each tier, and what failed.

/**
 * Counts from whichever runner the tier used: Node's test runner (TAP `# pass N` or spec
 * `ℹ pass N`, once per `node --test` invocation) or our native harness (`N passed, N failed`).
 */
export function countResults(output) {
  const sum = (pattern) => [...output.matchAll(pattern)].reduce((n, m) => n + Number(m[1]), 0);
  const nodePassed = sum(/^(?:[\w-]+: )?(?:#|ℹ) pass (\d+)$/gm);
  const nodeFailed =
    sum(/^(?:[\w-]+: )?(?:#|ℹ) fail (\d+)$/gm) + sum(/^(?:[\w-]+: )?(?:#|ℹ) cancelled (\d+)$/gm);
  const plain = [...output.matchAll(/^(?:[\w-]+: )?(\d+) passed, (\d+) failed/gm)];
  const plainPassed = plain.reduce((n, m) => n + Number(m[1]), 0);
  const plainFailed = plain.reduce((n, m) => n + Number(m[2]), 0);
  return { passed: nodePassed + plainPassed, failed: nodeFailed + plainFailed };
}

/**
 * What failed, in a few lines per failure, for the summary: CI shows only the end of the log.
 * Node's TAP `not ok` with its location and the first lines of its error (suites that failed
 * only through a subtest are left out), Vitest's and our native harness's `FAIL` lines.
 */
export function failureLines(output, { maxFailures = 5, errorLines = 4 } = {}) {
  const lines = output.split('\n').map((line) => line.replace(/^[\w-]+: /, ''));
  const failures = [];
  for (let i = 0; i < lines.length && failures.length < maxFailures; i++) {
    const line = lines[i];
    const notOk = /^\s*not ok \d+ - (.*)$/.exec(line);
    if (notOk) {
      const block = [];
      for (let j = i + 1; j < lines.length && !/^\s*\.\.\.$/.test(lines[j]); j++) {
        block.push(lines[j]);
      }
      if (block.some((b) => /failureType: 'subtestsFailed'/.test(b))) continue;
      const location = block.map((b) => /^\s*location: '(.*)'$/.exec(b)?.[1]).find(Boolean);
      const errorAt = block.findIndex((b) => /^\s*error: /.test(b));
      const indent = errorAt < 0 ? 0 : /^\s*/.exec(block[errorAt])[0].length;
      const continued = block.slice(errorAt + 1);
      const end = continued.findIndex((b) => b.trim() !== '' && /^\s*/.exec(b)[0].length <= indent);
      const error =
        errorAt < 0
          ? []
          : [
              block[errorAt].replace(/^\s*error: (\|-)?/, ''),
              ...continued.slice(0, end < 0 ? undefined : end),
            ]
              .map((b) => b.trim().replace(/^'(.*)'$/, '$1'))
              .filter((b) => b !== '')
              .slice(0, errorLines);
      failures.push([
        `not ok: ${notOk[1]}${location ? ` (${location})` : ''}`,
        ...error.map((e) => `  ${e}`),
      ]);
    } else if (/^\s*(FAIL|×)\s+\S/.test(line)) {
      failures.push([line.trim()]);
    }
  }
  return failures.flat();
}
