import { InMemoryShardCommands, type RecordedShardCommand } from './shard-commands.js';

/**
 * Test double of the agent link: records every command like InMemoryShardCommands and, while
 * `failure` is set, rejects each one with it (an unreachable or refusing agent).
 */
export class FakeShardCommands extends InMemoryShardCommands {
  failure: Error | undefined;

  protected override record(command: RecordedShardCommand): Promise<void> {
    void super.record(command);
    return this.failure === undefined ? Promise.resolve() : Promise.reject(this.failure);
  }
}
