/** Number formats and markdown tables, shared by every report. */

export const fmt = (n: number, digits = 1): string =>
  Number.isFinite(n)
    ? n.toLocaleString('en-US', { maximumFractionDigits: digits, minimumFractionDigits: 0 })
    : '–';

/** Milliseconds with the digits that matter at their size. */
export const ms = (n: number): string => fmt(n, n < 10 ? 2 : n < 100 ? 1 : 0);

export const pct = (x: number, digits = 1): string =>
  Number.isFinite(x) ? `${fmt(100 * x, digits)} %` : '–';

export const slash = (values: readonly number[], f: (n: number) => string): string =>
  values.map(f).join(' / ');

/** "reason count, …" of the non-zero counts. */
export const counts = (c: Record<string, number>): string =>
  Object.entries(c)
    .filter(([, v]) => v > 0)
    .map(([k, v]) => `${k} ${fmt(v, 0)}`)
    .join(', ');

/** The highest holders seen on one channel over its max, flagged when above. */
export const highestText = (highest: Record<string, number>, max: number): string => {
  const top = Math.max(0, ...Object.values(highest));
  return `${top}/${max}${top > max ? ' **OVERSOLD**' : ''}`;
};

/** A column: its header and its cell for one row. */
export type Column<T> = readonly [header: string, cell: (row: T) => string | number];

/** A markdown table of `rows`, one column of each of `cols`. */
export function columns<T>(rows: readonly T[], cols: readonly Column<T>[]): string {
  const line = (cells: readonly (string | number)[]) => `| ${cells.join(' | ')} |`;
  return [
    line(cols.map((c) => c[0])),
    line(cols.map(() => '---')),
    ...rows.map((r) => line(cols.map((c) => c[1](r)))),
  ].join('\n');
}
