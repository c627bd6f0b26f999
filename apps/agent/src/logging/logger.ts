import { pino, type DestinationStream, type Level, type Logger } from 'pino';

export type { Logger } from 'pino';

/** Injection token of the root pino logger; services take `logger.child({ module: '...' })`. */
export const LOGGER = Symbol('Logger');

export type LogLevel = Level | 'silent';

export function createLogger(
  level: LogLevel,
  hostId: string,
  destination?: DestinationStream,
): Logger {
  const options = { level, base: { service: 'agent', hostId } };
  return destination ? pino(options, destination) : pino(options);
}

/** Nest's own messages as pino lines: the adapter both apps share. */
export { PinoNestLogger } from '@gpushards/link';
