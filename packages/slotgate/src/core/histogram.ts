/** A fixed-bucket latency histogram (ms) with quantile estimates; the gateway exports it to Prometheus. */

const LATENCY_BUCKETS_MS = [0.5, 1, 2, 5, 10, 25, 50, 100, 250, 500, 1000, 2500, 5000, 10000, 30000, 60000];

export interface HistogramSnapshot {
  buckets: readonly number[];
  /** counts[i] = observations ≤ buckets[i] and > buckets[i-1]; the last entry counts observations above every bucket. */
  counts: readonly number[];
  count: number;
  sum: number;
  p50: number;
  p99: number;
}

export class Histogram {
  private readonly counts: number[];
  private count = 0;
  private sum = 0;

  constructor(readonly buckets: readonly number[] = LATENCY_BUCKETS_MS) {
    this.counts = new Array<number>(buckets.length + 1).fill(0);
  }

  observe(value: number): void {
    let i = 0;
    while (i < this.buckets.length && value > this.buckets[i]!) i++;
    this.counts[i]!++;
    this.count++;
    this.sum += value;
  }

  /** Upper bound of the bucket holding quantile q (0 with no observations). */
  quantile(q: number): number {
    if (this.count === 0) return 0;
    const rank = Math.ceil(q * this.count);
    let seen = 0;
    for (let i = 0; i < this.counts.length; i++) {
      seen += this.counts[i]!;
      if (seen >= rank) return this.buckets[i] ?? Infinity;
    }
    return Infinity;
  }

  snapshot(): HistogramSnapshot {
    return {
      buckets: this.buckets,
      counts: [...this.counts],
      count: this.count,
      sum: this.sum,
      p50: this.quantile(0.5),
      p99: this.quantile(0.99),
    };
  }
}
