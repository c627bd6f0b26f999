import { DynamicModule, Global, Module } from '@nestjs/common';
import { CONTROL_PLANE_CONFIG, type ControlPlaneConfig } from './control-plane-config.js';

/** Makes the resolved configuration injectable as CONTROL_PLANE_CONFIG everywhere. */
@Global()
@Module({})
export class ConfigModule {
  static forRoot(config: ControlPlaneConfig): DynamicModule {
    return {
      module: ConfigModule,
      providers: [{ provide: CONTROL_PLANE_CONFIG, useValue: config }],
      exports: [CONTROL_PLANE_CONFIG],
    };
  }
}
