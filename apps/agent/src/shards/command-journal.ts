/**
 * Remembers the replies to recent commands by command id, so that a retried command gets
 * the reply of the first delivery without acting twice, even while the first is still
 * being handled (both wait for the same promise). The oldest entries are forgotten first.
 */
export class CommandJournal<Reply> {
  private readonly replies = new Map<string, Promise<Reply>>();

  constructor(private readonly capacity = 4096) {
    if (!Number.isInteger(capacity) || capacity < 1) {
      throw new RangeError(
        `a command journal needs room for at least one command, got ${capacity}`,
      );
    }
  }

  /** The remembered reply for `commandId`, or the reply `execute` gives (then remembered). */
  once(
    commandId: string,
    execute: () => Promise<Reply>,
  ): { reply: Promise<Reply>; repeated: boolean } {
    const known = this.replies.get(commandId);
    if (known !== undefined) return { reply: known, repeated: true };
    const reply = execute();
    this.replies.set(commandId, reply);
    while (this.replies.size > this.capacity) {
      const oldest = this.replies.keys().next().value as string;
      this.replies.delete(oldest);
    }
    return { reply, repeated: false };
  }

  get size(): number {
    return this.replies.size;
  }
}
