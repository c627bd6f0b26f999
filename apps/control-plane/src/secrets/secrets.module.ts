import { Global, Module } from '@nestjs/common';
import { CONTROL_PLANE_CONFIG, type ControlPlaneConfig } from '../config/control-plane-config.js';
import { SecretBox } from './secret-box.js';
import { loadSecretsKey } from './secrets-key.js';

/** The SecretBox that seals secret env values, keyed from the config or the data folder. */
@Global()
@Module({
  providers: [
    {
      provide: SecretBox,
      inject: [CONTROL_PLANE_CONFIG],
      useFactory: (config: ControlPlaneConfig) => loadSecretsKey(config.dataDir, config.secretsKey),
    },
  ],
  exports: [SecretBox],
})
export class SecretsModule {}
