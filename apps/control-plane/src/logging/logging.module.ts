import { DynamicModule, Global, Module } from '@nestjs/common';
import { LOGGER, OPERATOR_OUTPUT, type Logger } from './logger.js';

@Global()
@Module({})
export class LoggingModule {
  static forRoot(logger: Logger, operatorOutput: NodeJS.WritableStream): DynamicModule {
    return {
      module: LoggingModule,
      providers: [
        { provide: LOGGER, useValue: logger },
        { provide: OPERATOR_OUTPUT, useValue: operatorOutput },
      ],
      exports: [LOGGER, OPERATOR_OUTPUT],
    };
  }
}
