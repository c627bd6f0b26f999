/**
 * How long a shard whose last suspend failed (its agent refused it, NOT_SUSPENDABLE, or its
 * driver did: SUSPEND_FAILED, the shard RUNNING again with Shard.memory.lastError) is taken as
 * not elastic by the queue and the idle policy: make-room passes over it, a reclaim stops it as
 * it stops a shard that is not elastic, the idle policy does not suspend it. Without it each
 * pass would pick it again at once (a process holding a CUDA IPC import refuses every suspend
 * for as long as it holds it); after it, one more try, since the cause may have gone.
 */
export const SUSPEND_RETRY_SECONDS = 600;
