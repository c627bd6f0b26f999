import { join } from 'node:path';

import { errorMessage } from '@gpushards/protocol';

import { DEFAULTS, type AgentConfig } from '../config/agent-options.js';
import { FAKE_LIBRARIES } from '../gpus/fake-driver.js';
import {
  CheckpointUnavailableError,
  openCheckpointApi,
  type CheckpointApi,
} from './checkpoint-driver.js';

/**
 * Whether this host suspends shards, as it registers (HostInfo.suspendBudgetBytes and
 * suspendUnavailableReason): a driver with the checkpoint API and a budget of host RAM above 0.
 */
export type SuspendCapability =
  | { readonly kind: 'available'; readonly api: CheckpointApi; readonly budgetBytes: number }
  | { readonly kind: 'unavailable'; readonly reason: string };

export const SUSPEND_CAPABILITY = Symbol('SuspendCapability');

/** The libcuda the agent's GPUs come from: NVIDIA's, the fakes', or none. */
export function checkpointLibrary(config: AgentConfig): string | undefined {
  const source = config.gpus;
  if (source.kind === 'nvml') return source.cudaLibrary ?? DEFAULTS.cudaLibrary;
  if (source.fakeLibraryDir !== undefined) return join(source.fakeLibraryDir, FAKE_LIBRARIES.cuda);
  return undefined;
}

/**
 * Opens the checkpoint API of the host's driver (`open` is openCheckpointApi; tests pass a
 * stand-in) unless the budget turns suspends off. Never throws: what is missing becomes the
 * reason the host registers with.
 */
export function suspendCapability(
  config: AgentConfig,
  open: (libraryPath: string) => CheckpointApi = openCheckpointApi,
): SuspendCapability {
  if (config.suspendBudgetBytes === 0) {
    return {
      kind: 'unavailable',
      reason: 'suspends are turned off on this host (GPUSHARDS_SUSPEND_BUDGET=0)',
    };
  }
  const library = checkpointLibrary(config);
  if (library === undefined) {
    return {
      kind: 'unavailable',
      reason:
        'simulated GPUs without the fake driver (GPUSHARDS_FAKE_LIBRARY_DIR) have no checkpoint API',
    };
  }
  try {
    return { kind: 'available', api: open(library), budgetBytes: config.suspendBudgetBytes };
  } catch (error) {
    if (!(error instanceof CheckpointUnavailableError)) {
      return { kind: 'unavailable', reason: `the checkpoint API failed: ${errorMessage(error)}` };
    }
    return { kind: 'unavailable', reason: error.message };
  }
}
