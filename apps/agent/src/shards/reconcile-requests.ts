import { Injectable } from '@nestjs/common';

/**
 * The control plane's `reconcile` command, passed from the command handlers to the agent's
 * life (AgentService runs reconciliations; it registers once it has registered itself, and a
 * request before that is moot: the agent reconciles at once when it starts).
 */
@Injectable()
export class ReconcileRequests {
  private listener: (() => void) | undefined;

  onRequest(listener: () => void): void {
    this.listener = listener;
  }

  /** Asks for a reconciliation now; false when nobody listens yet. */
  request(): boolean {
    if (this.listener === undefined) return false;
    this.listener();
    return true;
  }
}
