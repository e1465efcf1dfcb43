/** A proportion with its 95 % Wilson score interval (well behaved for rare events and zero counts). */
export interface RateEstimate {
  successes: number;
  trials: number;
  rate: number;
  low: number;
  high: number;
}

const Z95 = 1.959963984540054;

export function wilson(successes: number, trials: number, z = Z95): RateEstimate {
  if (trials <= 0) return { successes, trials, rate: 0, low: 0, high: 1 };
  const p = successes / trials;
  const z2 = z * z;
  const denominator = 1 + z2 / trials;
  const centre = (p + z2 / (2 * trials)) / denominator;
  const half = (z * Math.sqrt((p * (1 - p)) / trials + z2 / (4 * trials * trials))) / denominator;
  return { successes, trials, rate: p, low: Math.max(0, centre - half), high: Math.min(1, centre + half) };
}

/** "1 in 1,515" for a rate; "never" for zero. */
export function oneIn(rate: number): string {
  if (rate <= 0) return "never";
  return `1 in ${Math.round(1 / rate).toLocaleString("en-US")}`;
}
