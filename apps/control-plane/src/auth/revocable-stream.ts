import type { Logger } from '../logging/logger.js';
import type { AuthService } from './auth.service.js';
import type { Caller } from './caller.js';

/** How often an open subscription's token is checked again while no event comes. */
export const SUBSCRIPTION_RECHECK_MS = 500;

/**
 * `source` for as long as `caller` still holds: every item is authorized when it is delivered
 * (AuthService.stillCurrent), the token is checked again every SUBSCRIPTION_RECHECK_MS, and a
 * revocation in this process ends it at once. Once the token no longer holds the stream ends
 * (the client sees `complete`) and nothing more is delivered.
 */
export function revocableStream<T>(
  source: AsyncIterableIterator<T>,
  caller: Caller,
  auth: AuthService,
  logger: Logger,
): AsyncIterableIterator<T> {
  let ended = false;
  const close = (): Promise<unknown> => {
    ended = true;
    clearInterval(timer);
    stopListening();
    return source.return?.() ?? Promise.resolve();
  };
  const end = (why: string) => {
    if (ended) return;
    logger.info({ tokenId: caller.tokenId, why }, 'subscription ended: its token no longer holds');
    void close();
  };
  const check = async (): Promise<boolean> => {
    try {
      if (await auth.stillCurrent(caller)) return true;
    } catch (error) {
      // The database did not answer: deliver nothing this time; the stream stays open.
      logger.warn({ err: error, tokenId: caller.tokenId }, 'could not check a subscription token');
      return false;
    }
    end('revoked or changed');
    return false;
  };
  const timer = setInterval(() => void check(), SUBSCRIPTION_RECHECK_MS);
  timer.unref();
  const stopListening = auth.onForget((tokenId) => {
    if (tokenId === caller.tokenId) end('revoked here');
  });
  const iterator: AsyncIterableIterator<T> = {
    next: async () => {
      for (;;) {
        if (ended) return { value: undefined, done: true };
        const next = await source.next();
        if (next.done === true || ended) {
          if (!ended) void close();
          return { value: undefined, done: true };
        }
        if (await check()) return next;
        // Not authorized now (or could not be checked): this event is dropped.
      }
    },
    return: async () => {
      await close();
      return { value: undefined, done: true };
    },
    [Symbol.asyncIterator]: () => iterator,
  };
  return iterator;
}
