import assert from 'node:assert/strict';
import { describe, test } from 'node:test';
import { imageAllowed, normalizeImageReference } from './image-allow-list.js';

describe('image allow-list', () => {
  test("Docker's normalisation", () => {
    assert.equal(normalizeImageReference('ubuntu'), 'docker.io/library/ubuntu');
    assert.equal(normalizeImageReference('ubuntu:22.04'), 'docker.io/library/ubuntu:22.04');
    assert.equal(normalizeImageReference('team/x:1'), 'docker.io/team/x:1');
    assert.equal(normalizeImageReference('localhost/x'), 'localhost/x');
    assert.equal(
      normalizeImageReference('registry.example.com:5000/a/b'),
      'registry.example.com:5000/a/b',
    );
    assert.equal(
      normalizeImageReference('index.docker.io/library/ubuntu'),
      'docker.io/library/ubuntu',
    );
  });

  test('an empty list allows everything', () => {
    assert.ok(imageAllowed('anything/at:all', []));
  });

  test('prefixes match at a boundary only', () => {
    const list = ['registry.example.com', 'docker.io/library/ubuntu', 'ghcr.io/team/'];
    for (const image of [
      'registry.example.com/a/b:1',
      'registry.example.com:5000/a/b',
      'ubuntu',
      'ubuntu:22.04',
      'docker.io/library/ubuntu@sha256:' + 'a'.repeat(64),
      'ghcr.io/team/trainer:2',
    ]) {
      assert.ok(imageAllowed(image, list), image);
    }
    for (const image of [
      'registry.example.com.evil.io/a',
      'ubuntu-evil',
      'evil/ubuntu',
      'ghcr.io/teamx/trainer',
      'ghcr.io/team',
      'docker.io/library/debian',
    ]) {
      assert.ok(!imageAllowed(image, list), image);
    }
  });
});
