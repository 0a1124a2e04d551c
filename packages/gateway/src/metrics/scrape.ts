/**
 * Metrics read at scrape time from the engine and the store instead of counted by the gateway: each collect() resets
 * its metric and sets every sample again, so a label value that went away leaves the exposition with it.
 */
import { Counter, Gauge, type Registry } from 'prom-client';

/** One series: its label values and its value. */
export type Sample<L extends string> = [Record<L, string>, number];

export interface ScrapedSpec<L extends string> {
  name: string;
  help: string;
  labelNames?: readonly L[];
  read: () => Sample<L>[] | Promise<Sample<L>[]>;
}

/** A count the engine keeps (monotonic there), exported as a counter at its value. */
export function scrapedCounter<L extends string>(register: Registry, spec: ScrapedSpec<L>): void {
  new Counter({ ...options(register, spec), collect: collector(spec) });
}

export function scrapedGauge<L extends string>(register: Registry, spec: ScrapedSpec<L>): void {
  new Gauge({ ...options(register, spec), collect: collector(spec) });
}

function options<L extends string>(register: Registry, { name, help, labelNames = [] }: ScrapedSpec<L>) {
  return { name, help, labelNames, registers: [register] };
}

/** `inc` after `reset` sets the value: prom-client counters have no `set`. */
function collector<L extends string>({ read }: ScrapedSpec<L>) {
  return async function (this: Counter<L> | Gauge<L>) {
    const samples = await read();
    this.reset();
    for (const [labels, value] of samples) this.inc(labels, value);
  };
}
