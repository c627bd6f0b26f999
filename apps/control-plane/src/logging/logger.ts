import type { LoggerService } from '@nestjs/common';
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

/**
 * Nest's own messages (module wiring, route mapping) as pino JSON lines, with Nest's
 * "context" (the class that logged) as a field.
 */
export class PinoNestLogger implements LoggerService {
  constructor(private readonly logger: Logger) {}

  log(message: unknown, ...params: unknown[]): void {
    this.write('info', message, params);
  }

  error(message: unknown, ...params: unknown[]): void {
    this.write('error', message, params);
  }

  warn(message: unknown, ...params: unknown[]): void {
    this.write('warn', message, params);
  }

  debug(message: unknown, ...params: unknown[]): void {
    this.write('debug', message, params);
  }

  verbose(message: unknown, ...params: unknown[]): void {
    this.write('trace', message, params);
  }

  fatal(message: unknown, ...params: unknown[]): void {
    this.write('fatal', message, params);
  }

  private write(level: Level, message: unknown, params: unknown[]): void {
    // Nest passes the context last; error() may pass a stack string before it.
    const context = typeof params.at(-1) === 'string' ? (params.at(-1) as string) : undefined;
    const stack = level === 'error' && params.length === 2 ? params[0] : undefined;
    const fields = { context, ...(typeof stack === 'string' ? { stack } : {}) };
    if (message instanceof Error) {
      this.logger[level]({ ...fields, err: message }, message.message);
    } else if (typeof message === 'object' && message !== null) {
      this.logger[level]({ ...fields, ...message });
    } else {
      this.logger[level](fields, String(message));
    }
  }
}
