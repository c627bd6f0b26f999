import { pino, type DestinationStream, type Level, type Logger } from 'pino';

export type { Logger } from 'pino';

/** Injection token of the root pino logger; modules take `logger.child({ module: '...' })`. */
export const LOGGER = Symbol('Logger');

/**
 * Where messages meant for the person starting the server go as plain text (the first admin
 * token), apart from the JSON log: process.stdout in production, a buffer in tests.
 */
export const OPERATOR_OUTPUT = Symbol('OperatorOutput');

export type LogLevel = Level | 'silent';

export function createLogger(level: LogLevel, destination?: DestinationStream): Logger {
  const options = { level, base: { service: 'control-plane' } };
  return destination ? pino(options, destination) : pino(options);
}

/** Nest's own messages as pino lines: the adapter both apps share. */
export { PinoNestLogger } from '@gpushards/link';
