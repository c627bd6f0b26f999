import { Inject, Injectable } from '@nestjs/common';
import { CONTROL_PLANE_CONFIG, type ControlPlaneConfig } from '../config/control-plane-config.js';
import { ImageNotAllowedError, NoAgentsError } from '../errors/domain-errors.js';
import { imageAllowed } from './image-allow-list.js';

/**
 * What may be launched at all, checked before anything is read or written: a control plane
 * started without agents on purpose refuses every shard (NO_AGENTS), and the image must pass
 * the fleet's allow-list (IMAGE_NOT_ALLOWED; GPUSHARDS_IMAGE_ALLOW_LIST, default: any image).
 */
@Injectable()
export class LaunchPolicy {
  constructor(@Inject(CONTROL_PLANE_CONFIG) private readonly config: ControlPlaneConfig) {}

  check(image: string): void {
    const { noAgents, imageAllowList } = this.config.security;
    if (noAgents) {
      throw new NoAgentsError(
        'this control plane runs without agents (GPUSHARDS_NO_AGENTS=true): no shard can be launched',
      );
    }
    if (!imageAllowed(image, imageAllowList)) {
      throw new ImageNotAllowedError(image, imageAllowList, 'fleet');
    }
  }
}
