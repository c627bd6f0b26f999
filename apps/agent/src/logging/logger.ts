import type { LoggerService } from '@nestjs/common';
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

/** Nest's own messages (module wiring) as pino JSON lines, with Nest's context as a field. */
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
    // Nest passes the context last.
    const context = typeof params.at(-1) === 'string' ? (params.at(-1) as string) : undefined;
    if (message instanceof Error) this.logger[level]({ context, err: message }, message.message);
    else this.logger[level]({ context }, String(message));
  }
}
