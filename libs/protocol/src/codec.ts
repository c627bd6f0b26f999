import { z } from 'zod';

import { hostIdFromSubject } from './subjects.js';
import { PROTOCOL_VERSION } from './version.js';

export type DecodeErrorCode = 'MALFORMED' | 'UNSUPPORTED_VERSION' | 'INVALID';
export type DecodeResult<T> =
  { ok: true; message: T } | { ok: false; error: { code: DecodeErrorCode; message: string } };

const strictUtf8 = new TextDecoder('utf-8', { fatal: true });
const MAX_ISSUES_IN_MESSAGE = 5;

/**
 * Decodes and validates one message. Never throws: a peer's bytes can be anything.
 *   MALFORMED            not UTF-8, not JSON, or not a JSON object
 *   UNSUPPORTED_VERSION  protocolVersion is a number other than PROTOCOL_VERSION
 *   INVALID              anything else the schema refuses
 * Unknown fields are dropped; see README.md, "Versioning".
 */
export function decodeMessage<S extends z.ZodType>(
  schema: S,
  raw: Uint8Array | string,
): DecodeResult<z.output<S>> {
  const what = schema.description ?? 'message';
  const fail = (code: DecodeErrorCode, message: string): DecodeResult<z.output<S>> => ({
    ok: false,
    error: { code, message: `${what}: ${message}` },
  });
  try {
    let text: string;
    try {
      text = typeof raw === 'string' ? raw : strictUtf8.decode(raw);
    } catch {
      return fail('MALFORMED', 'payload is not valid UTF-8');
    }
    let value: unknown;
    try {
      value = JSON.parse(text);
    } catch (error) {
      return fail('MALFORMED', `payload is not JSON (${(error as Error).message})`);
    }
    if (typeof value !== 'object' || value === null || Array.isArray(value)) {
      return fail('MALFORMED', `expected a JSON object, got ${describeJsonType(value)}`);
    }
    const version = (value as { protocolVersion?: unknown }).protocolVersion;
    if (typeof version === 'number' && version !== PROTOCOL_VERSION) {
      return fail(
        'UNSUPPORTED_VERSION',
        `the sender speaks protocolVersion ${version}, this side speaks protocolVersion ${PROTOCOL_VERSION}`,
      );
    }
    const parsed = schema.safeParse(value);
    if (!parsed.success) return fail('INVALID', formatIssues(parsed.error.issues));
    return { ok: true, message: parsed.data };
  } catch (error) {
    // A bug of ours (or of zod); the caller still gets an answer, not an exception.
    return fail('INVALID', `could not be validated (${String(error)})`);
  }
}

/** Validates then encodes one of our own messages; throws on a message we should not have built. */
export function encodeMessage<S extends z.ZodType>(schema: S, message: z.input<S>): string {
  const parsed = schema.safeParse(message);
  if (!parsed.success) {
    const what = schema.description ?? 'message';
    throw new Error(
      `refusing to send an invalid ${what}: ${formatIssues(parsed.error.issues)} (a bug in the sender)`,
    );
  }
  return JSON.stringify(parsed.data);
}

export type SubjectHostCheck =
  | { ok: true }
  | { ok: false; error: { code: 'INVALID_SUBJECT' | 'HOST_MISMATCH'; message: string } };

/**
 * Checks that a message's hostId is the host its subject names, so an agent cannot
 * speak for another host (its NATS permissions bind the subject, this binds the body).
 */
export function checkSubjectHost(subject: string, message: { hostId: string }): SubjectHostCheck {
  const parsed = hostIdFromSubject(subject);
  if (!parsed.ok) return parsed;
  if (parsed.hostId !== message.hostId) {
    return {
      ok: false,
      error: {
        code: 'HOST_MISMATCH',
        message: `message for host ${JSON.stringify(message.hostId)} arrived on subject ${JSON.stringify(subject)} of host ${JSON.stringify(parsed.hostId)}`,
      },
    };
  }
  return { ok: true };
}

/** One line: `path: message; path: message`, the first few issues. */
export function formatIssues(issues: readonly z.core.$ZodIssue[]): string {
  const lines = issues.slice(0, MAX_ISSUES_IN_MESSAGE).map((issue) => {
    const path = issue.path.map(String).join('.');
    // zod's own text for a bad record key is "Invalid key in record"; the key's rule says why.
    const message =
      issue.code === 'invalid_key' && issue.issues.length > 0
        ? issue.issues.map((inner) => inner.message).join(', ')
        : issue.message;
    return path === '' ? message : `${path}: ${message}`;
  });
  const more = issues.length - MAX_ISSUES_IN_MESSAGE;
  if (more > 0) lines.push(`and ${more} more`);
  return lines.join('; ');
}

function describeJsonType(value: unknown): string {
  if (value === null) return 'null';
  if (Array.isArray(value)) return 'an array';
  return `a ${typeof value}`;
}
