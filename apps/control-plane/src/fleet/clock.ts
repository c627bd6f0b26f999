import { Global, Inject, Module, type DynamicModule } from '@nestjs/common';

/** Where the fleet module reads the time: heartbeats, offline deadlines. */
export interface Clock {
  now(): Date;
}

export const CLOCK = Symbol('Clock');

export const systemClock: Clock = { now: () => new Date() };

/** A clock that moves only when told: tests of timeouts that do not sleep. */
export class ManualClock implements Clock {
  private current: number;

  constructor(start: Date = new Date()) {
    this.current = start.getTime();
  }

  now(): Date {
    return new Date(this.current);
  }

  advance(milliseconds: number): void {
    this.current += milliseconds;
  }
}

/** Provides CLOCK everywhere: the given clock, or the system's. */
@Global()
@Module({})
export class ClockModule {
  static forRoot(clock: Clock = systemClock): DynamicModule {
    return {
      module: ClockModule,
      providers: [{ provide: CLOCK, useValue: clock }],
      exports: [CLOCK],
    };
  }
}

export const InjectClock = () => Inject(CLOCK);
