/** Seeded draws: the open-loop traces, the clients' holds and the fleet simulator's arrivals all come from here. */
// Internal (not public API): the library's seeded PRNG, reused rather than copied.
import { seededRandom } from '../packages/slotgate/src/core/order.js';

export { seededRandom };

export type Random = () => number;

/** A log-normal hold time: `medianMs · e^(sigma · Z)`, Z standard normal, cut at `capMs`. */
export interface HoldShape {
  medianMs: number;
  sigma: number;
  capMs: number;
}

/** An exponential gap in ms between arrivals of a Poisson stream of `ratePerS` arrivals per second. */
export const exponentialMs = (random: Random, ratePerS: number): number =>
  (-Math.log(1 - random()) / ratePerS) * 1000;

export function logNormalMs(random: Random, shape: HoldShape): number {
  const u = 1 - random(); // (0, 1]: log(0) never happens
  const z = Math.sqrt(-2 * Math.log(u)) * Math.cos(2 * Math.PI * random()); // Box–Muller, one of the pair
  return Math.min(shape.capMs, shape.medianMs * Math.exp(shape.sigma * z));
}

/** erf by Abramowitz–Stegun 7.1.26 (absolute error < 1.5e-7), enough for a mean in ms. */
function erf(x: number): number {
  const t = 1 / (1 + 0.3275911 * Math.abs(x));
  const y =
    1 -
    ((((1.061405429 * t - 1.453152027) * t + 1.421413741) * t - 0.284496736) * t + 0.254829592) *
      t *
      Math.exp(-x * x);
  return x >= 0 ? y : -y;
}

const normalCdf = (x: number) => 0.5 * (1 + erf(x / Math.SQRT2));

/** E[min(X, cap)] for the log-normal X of `shape`, ms. */
export function meanHoldMs(shape: HoldShape): number {
  const mu = Math.log(shape.medianMs);
  const s = shape.sigma;
  const lnCap = Math.log(shape.capMs);
  return (
    Math.exp(mu + (s * s) / 2) * normalCdf((lnCap - mu - s * s) / s) +
    shape.capMs * (1 - normalCdf((lnCap - mu) / s))
  );
}

export const holdText = (h: HoldShape): string =>
  `log-normal holds (median ${h.medianMs} ms, σ ${h.sigma}, capped at ${h.capMs / 1000} s; mean ` +
  `${Math.round(meanHoldMs(h))} ms)`;

/** FNV-1a over the parts joined by ':': the seed of one worker's or engine's own stream. */
export function seedOf(...parts: readonly (string | number)[]): number {
  let h = 0x811c9dc5;
  for (const ch of parts.join(':')) {
    h ^= ch.charCodeAt(0);
    h = Math.imul(h, 0x01000193) >>> 0;
  }
  return h;
}
