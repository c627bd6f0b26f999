import type { z } from 'zod';

import { decodeMessage, encodeMessage } from './codec.js';

/**
 * One agent request (register, reconcile) over any transport: encodes `message` with
 * `requestSchema`, hands it to `send`, and decodes the answer with `replySchema`. Throws when
 * the answer is unusable or names a host other than `hostId`; `send` throws its own errors
 * (an unreachable control plane, a timeout) as they are.
 */
export async function requestMessage<Q extends z.ZodType, R extends z.ZodType>(
  send: (subject: string, data: string) => Promise<Uint8Array | string>,
  subject: string,
  hostId: string,
  requestSchema: Q,
  message: z.input<Q>,
  replySchema: R,
): Promise<z.output<R>> {
  const raw = await send(subject, encodeMessage(requestSchema, message));
  const decoded = decodeMessage(replySchema, raw);
  if (!decoded.ok) {
    throw new Error(
      `the control plane's answer on ${subject} is unusable: ${decoded.error.message}`,
    );
  }
  const reply = decoded.message as { hostId: string };
  if (reply.hostId !== hostId) {
    throw new Error(
      `the control plane answered on ${subject} for host ${JSON.stringify(reply.hostId)}, not ${JSON.stringify(hostId)}`,
    );
  }
  return decoded.message;
}
