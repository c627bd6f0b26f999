import type { Runner } from '../support/runner.js';
import type { World } from '../support/world.js';

export function faultChecks(_runner: Runner, _world: World): void {}
