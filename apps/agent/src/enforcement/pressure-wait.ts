/**
 * How long libvgpu.so holds an allocation that the driver refused although the shard's budget
 * allows it (issue #31): such a shortage is memory someone else holds past what placement
 * promised, which the fence frees by killing the offender. The shard's refused allocation rings
 * the region's pressure bell, which makes the fence sample that GPU at once; the wait covers
 * the case where that ring is not seen (the fence's next tick) and what follows the sample:
 *
 *   pressure_wait_ms = GPUSHARDS_SAMPLE_MS + KILL_AND_TEARDOWN_MS
 *
 * KILL_AND_TEARDOWN_MS is the SIGKILL reaching the offender and the driver releasing its
 * memory. On an H200 (issue #31) the neighbour saw refusals for 30–86 ms after the offender's
 * grab with the fence at 50 ms (so at most about 36 ms after its next tick); 250 ms leaves room
 * for a larger offender's teardown on a loaded host while keeping a refused allocation's wait
 * under a third of a second at the default interval (300 ms). With the fence off (0) nothing
 * frees the memory: the file says 0, and libvgpu.so keeps its own default (300 ms), which only
 * delays a refusal that stands.
 */
export const KILL_AND_TEARDOWN_MS = 250;

/** What the limits file can say (MAX_PRESSURE_WAIT_MS in limits-file.ts). */
const MOST_MS = 60_000;

export function pressureWaitMs(sampleMs: number): number {
  return sampleMs === 0 ? 0 : Math.min(MOST_MS, sampleMs + KILL_AND_TEARDOWN_MS);
}
