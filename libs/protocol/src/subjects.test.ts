import { describe, test } from 'node:test';
import assert from 'node:assert/strict';

import { checkSubjectHost } from './codec.js';
import { assertValidHostId, isValidHostId } from './primitives.js';
import {
  CONTROL_PLANE_PERMISSIONS,
  CONTROL_PLANE_QUEUE_GROUP,
  CONTROL_PLANE_SUBSCRIPTIONS,
  agentInboxPrefix,
  agentPermissions,
  agentSubjects,
  hostIdFromSubject,
  hostSubjects,
} from './subjects.js';

/** NATS subject matching: `*` one token, `>` one or more trailing tokens. */
function natsMatches(pattern: string, subject: string): boolean {
  const patternTokens = pattern.split('.');
  const subjectTokens = subject.split('.');
  for (const [i, token] of patternTokens.entries()) {
    if (token === '>') return subjectTokens.length > i;
    if (i >= subjectTokens.length) return false;
    if (token !== '*' && token !== subjectTokens[i]) return false;
  }
  return patternTokens.length === subjectTokens.length;
}

const allowed = (patterns: string[], subject: string) =>
  patterns.some((pattern) => natsMatches(pattern, subject));

describe('subjects', () => {
  test('per-host subjects', () => {
    assert.deepEqual(agentSubjects('box-1'), {
      register: 'gpushards.agent.box-1.register',
      heartbeat: 'gpushards.agent.box-1.heartbeat',
      state: 'gpushards.agent.box-1.state',
      reconcile: 'gpushards.agent.box-1.reconcile',
      wake: 'gpushards.agent.box-1.wake',
    });
    assert.deepEqual(hostSubjects('box-1'), { cmd: 'gpushards.host.box-1.cmd' });
    assert.equal(agentInboxPrefix('box-1'), 'gpushards.inbox.box-1');
    assert.equal(CONTROL_PLANE_QUEUE_GROUP, 'gpushards-control-plane');
  });

  test('the control plane subscriptions match every agent subject', () => {
    for (const [kind, subject] of Object.entries(agentSubjects('box-1'))) {
      const pattern = CONTROL_PLANE_SUBSCRIPTIONS[kind as keyof typeof CONTROL_PLANE_SUBSCRIPTIONS];
      assert.ok(natsMatches(pattern, subject), `${pattern} should match ${subject}`);
    }
  });

  test('host ids are safe subject tokens', () => {
    for (const good of ['a', 'box-1', 'GPU_node_07', 'x'.repeat(64)]) {
      assert.ok(isValidHostId(good), good);
    }
    for (const bad of ['', 'a.b', '*', '>', 'a b', 'x'.repeat(65), 'box/1', 'hôte', 'a\n']) {
      assert.equal(isValidHostId(bad), false, JSON.stringify(bad));
      assert.throws(() => agentSubjects(bad), /invalid host id .*no dots or wildcards/);
    }
    assert.throws(() => assertValidHostId('a.b'), /invalid host id "a\.b": a host id must be 1-64/);
  });

  test('hostIdFromSubject reads what the builders write', () => {
    assert.deepEqual(hostIdFromSubject('gpushards.agent.box-1.heartbeat'), {
      ok: true,
      direction: 'agent',
      hostId: 'box-1',
      kind: 'heartbeat',
    });
    assert.deepEqual(hostIdFromSubject(hostSubjects('box-2').cmd), {
      ok: true,
      direction: 'host',
      hostId: 'box-2',
      kind: 'cmd',
    });
  });

  test('hostIdFromSubject refuses anything else with INVALID_SUBJECT', () => {
    const cases: [string, RegExp][] = [
      ['', /is not of the form/],
      ['gpushards.agent.box-1', /is not of the form/],
      ['other.agent.box-1.heartbeat', /is not of the form/],
      ['gpushards.agent.box-1.heartbeat.extra', /is not of the form/],
      ['gpushards.agent.*.heartbeat', /invalid host id "\*"/],
      ['gpushards.agent..heartbeat', /invalid host id ""/],
      ['gpushards.agent.box-1.cmd', /names no known message/],
      ['gpushards.host.box-1.heartbeat', /names no known message/],
      ['gpushards.inbox.box-1.abc', /names no known message/],
    ];
    for (const [subject, message] of cases) {
      const result = hostIdFromSubject(subject);
      assert.ok(!result.ok, subject);
      assert.equal(result.error.code, 'INVALID_SUBJECT');
      assert.match(result.error.message, message);
    }
  });

  test('checkSubjectHost binds the body to the subject', () => {
    const subject = agentSubjects('box-1').heartbeat;
    assert.deepEqual(checkSubjectHost(subject, { hostId: 'box-1' }), { ok: true });
    const mismatch = checkSubjectHost(subject, { hostId: 'box-2' });
    assert.ok(!mismatch.ok);
    assert.equal(mismatch.error.code, 'HOST_MISMATCH');
    assert.equal(
      mismatch.error.message,
      'message for host "box-2" arrived on subject "gpushards.agent.box-1.heartbeat" of host "box-1"',
    );
    const badSubject = checkSubjectHost('gpushards.agent.box-1', { hostId: 'box-1' });
    assert.ok(!badSubject.ok);
    assert.equal(badSubject.error.code, 'INVALID_SUBJECT');
  });
});

describe('permissions', () => {
  const a = agentPermissions('box-a');

  test('an agent publishes only its own agent subjects', () => {
    for (const subject of Object.values(agentSubjects('box-a'))) {
      assert.ok(allowed(a.publish.allow, subject), subject);
    }
    for (const subject of [
      agentSubjects('box-b').heartbeat,
      hostSubjects('box-a').cmd,
      hostSubjects('box-b').cmd,
      '_INBOX.abc.1',
      'gpushards.inbox.box-b.abc.1',
    ]) {
      assert.equal(allowed(a.publish.allow, subject), false, subject);
    }
    // Command replies go out through allow_responses, not a publish grant.
    assert.equal(a.allow_responses, true);
  });

  test('an agent receives only its commands and its own inbox', () => {
    assert.ok(allowed(a.subscribe.allow, hostSubjects('box-a').cmd));
    assert.ok(allowed(a.subscribe.allow, `${agentInboxPrefix('box-a')}.nuid123.7`));
    for (const subject of [
      hostSubjects('box-b').cmd,
      `${agentInboxPrefix('box-b')}.nuid123.7`,
      '_INBOX.nuid123.7',
      agentSubjects('box-b').reconcile,
    ]) {
      assert.equal(allowed(a.subscribe.allow, subject), false, subject);
    }
  });

  test('the control plane reaches every host and hears every agent', () => {
    assert.ok(allowed(CONTROL_PLANE_PERMISSIONS.publish.allow, hostSubjects('box-b').cmd));
    for (const pattern of Object.values(CONTROL_PLANE_SUBSCRIPTIONS)) {
      assert.ok(allowed(CONTROL_PLANE_PERMISSIONS.subscribe.allow, pattern.replace('*', 'x')));
    }
    assert.ok(allowed(CONTROL_PLANE_PERMISSIONS.subscribe.allow, '_INBOX.nuid.1'));
  });
});
