import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { imageReferenceProblem } from './shard-input.js';

describe('image references', () => {
  it('accepts what docker pull accepts', () => {
    for (const image of [
      'ubuntu',
      'ubuntu:22.04',
      'library/ubuntu',
      'nvcr.io/nvidia/pytorch:24.05-py3',
      'ghcr.io/org/team/trainer:1.2.3',
      'localhost:5000/trainer',
      'registry.example.com:443/a_b/c__d/e-f.g:Tag_1',
      'UPPER.example.com/lower/path:latest',
      `ubuntu@sha256:${'a'.repeat(64)}`,
      `ghcr.io/org/x:1@sha256:${'0'.repeat(64)}`,
      '[::1]:5000/trainer',
    ]) {
      assert.equal(imageReferenceProblem(image), undefined, image);
    }
  });

  it('refuses everything else, and long input without reading it all', () => {
    for (const image of [
      '',
      'Ubuntu',
      'ubuntu:',
      'ubuntu::1',
      'ubuntu:-tag',
      '-ubuntu',
      'ubuntu/',
      '/ubuntu',
      'a//b',
      'ubuntu@sha256:abc',
      'ubuntu latest',
      "x'; DROP TABLE shard; --",
      'ubuntu:$(reboot)',
      `ubuntu:${'t'.repeat(129)}`,
      `${'a/'.repeat(130)}b`,
    ]) {
      assert.notEqual(imageReferenceProblem(image), undefined, image);
    }
    assert.match(
      imageReferenceProblem('a'.repeat(1024 * 1024)) ?? '',
      /at most 512 characters, got 1048576/,
    );
  });
});
