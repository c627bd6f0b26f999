/** The q-quantile (0..1) of `values` by the nearest rank below; NaN for none. Shared by benches. */
export function quantile(values, q) {
  const sorted = [...values].sort((a, b) => a - b);
  return sorted.length === 0
    ? NaN
    : sorted[Math.min(sorted.length - 1, Math.floor(q * sorted.length))];
}
