import assert from 'node:assert/strict';
import { describe, it } from 'node:test';

import { DEFAULT_SIMULATED_MODEL, parseSimulatedGpus } from './simulated-gpus.js';

const GiB = 1024 ** 3;

describe('parseSimulatedGpus', () => {
  it('reads a count and a size', () => {
    assert.deepEqual(parseSimulatedGpus('2x24g'), [
      { model: DEFAULT_SIMULATED_MODEL, totalBytes: 24 * GiB },
      { model: DEFAULT_SIMULATED_MODEL, totalBytes: 24 * GiB },
    ]);
  });

  it('reads models, several groups and spaces', () => {
    assert.deepEqual(parseSimulatedGpus(' 1xH100:80g , 1 x NVIDIA L4:24GiB'), [
      { model: 'H100', totalBytes: 80 * GiB },
      { model: 'NVIDIA L4', totalBytes: 24 * GiB },
    ]);
    assert.deepEqual(parseSimulatedGpus('NVIDIA A100-SXM4-80GB:1536m'), [
      { model: 'NVIDIA A100-SXM4-80GB', totalBytes: 1536 * 1024 ** 2 },
    ]);
  });

  it('refuses what it cannot read, saying why', () => {
    const cases: [string, RegExp][] = [
      ['', /it is empty/],
      ['0x24g', /count .* must be 1-64/],
      ['65x1g', /count .* must be 1-64/],
      ['2x24gb', /ambiguous/],
      ['2x', /cannot read|size/],
      ['a:b:24g', /cannot read the group/],
      ['2x24g,', /cannot read the group ""/],
      ['40x1g,40x1g', /80 GPUs, at most 64/],
    ];
    for (const [spec, message] of cases) {
      assert.throws(() => parseSimulatedGpus(spec), message, spec);
    }
  });
});
