/**
 * docs/grafana-dashboard.json refers only to metrics that exist: every metric name in its PromQL expressions (panel
 * targets and the template variables' queries) is a family of a gateway's /metrics — a gateway on the test Redis, so
 * the Redis node gauges are there too — or a histogram's _bucket/_sum/_count series. The name extraction is checked
 * on its own: it finds the names the dashboard is known to use, and a dashboard with one name misspelt fails.
 */
import { readFileSync } from 'node:fs';
import { describe, expect, it } from 'vitest';
import { call, chat, CLIENT, configDoc, startGateway } from '../helpers/gateway.js';
import { parsePrometheusText, type Exposition } from '../helpers/prom-text.js';
import { useCleanups } from '../helpers/cleanups.js';

const DASHBOARD_TEXT = readFileSync(new URL('../../docs/grafana-dashboard.json', import.meta.url), 'utf8');

const cleanups = useCleanups();

interface Panel {
  title?: string;
  type: string;
  targets?: Array<{ expr?: string }>;
  panels?: Panel[];
}
interface Dashboard {
  panels: Panel[];
  templating?: { list: Array<{ type: string; query?: unknown; definition?: string }> };
}

/** PromQL words that are not metric names: operators, modifiers, and what follows `by`/`without`. */
const KEYWORDS = new Set([
  'and',
  'or',
  'unless',
  'bool',
  'offset',
  'by',
  'without',
  'on',
  'ignoring',
  'group_left',
  'group_right',
  'inf',
  'nan',
]);

/** The metric names in one PromQL expression (Grafana's $variables allowed). */
function metricNames(expr: string): string[] {
  const bare = expr
    .replace(/"(?:[^"\\]|\\.)*"/g, '""') // label values
    .replace(/\{[^}]*\}/g, ' ') // label matchers
    .replace(/\[[^\]]*\]/g, ' ') // range selectors ([$__rate_interval], [5m])
    .replace(/\b(by|without|on|ignoring|group_left|group_right)\s*\([^)]*\)/g, ' ') // label lists
    .replace(/\$\{?\w+\}?/g, ' '); // Grafana variables
  const names: string[] = [];
  for (const m of bare.matchAll(/(?<![\w.])[a-zA-Z_:][a-zA-Z0-9_:]*/g)) {
    const after = bare.slice(m.index + m[0].length).trimStart();
    if (after.startsWith('(')) continue; // a function: sum(, rate(, histogram_quantile(
    if (KEYWORDS.has(m[0].toLowerCase())) continue;
    names.push(m[0]);
  }
  return names;
}

/** Every PromQL expression of the dashboard: panel targets (rows included) and query variables. */
function expressions(dashboard: Dashboard): Array<{ where: string; expr: string }> {
  const out: Array<{ where: string; expr: string }> = [];
  const walk = (panels: Panel[]) => {
    for (const p of panels) {
      for (const t of p.targets ?? []) out.push({ where: `panel "${p.title}"`, expr: t.expr ?? '' });
      walk(p.panels ?? []);
    }
  };
  walk(dashboard.panels);
  for (const v of dashboard.templating?.list ?? []) {
    if (v.type !== 'query') continue;
    const query = typeof v.query === 'string' ? v.query : (v.query as { query: string }).query;
    // label_values(metric, label): only the first argument is a metric
    const labelValues = /^label_values\(\s*([^,]+),\s*\w+\s*\)$/.exec(query);
    out.push({ where: `variable query ${query}`, expr: labelValues ? labelValues[1]! : query });
  }
  return out;
}

/** Whether /metrics has the series name: a family, or a histogram's (or a summary's) suffixed series. */
function exists(exp: Exposition, name: string): boolean {
  if (exp.families.has(name)) return true;
  const m = /^(.*)_(bucket|sum|count)$/.exec(name);
  const family = m ? exp.families.get(m[1]!) : undefined;
  return family?.type === 'histogram' || (family?.type === 'summary' && m?.[2] !== 'bucket');
}

/** The names the dashboard uses that /metrics lacks, each with where it is used. */
function missing(dashboard: Dashboard, exp: Exposition): string[] {
  return expressions(dashboard).flatMap(({ where, expr }) =>
    metricNames(expr)
      .filter((n) => !exists(exp, n))
      .map((n) => `${n} (${where})`),
  );
}

describe('docs/grafana-dashboard.json', () => {
  it('reads metric names out of PromQL', () => {
    expect(
      metricNames(
        'histogram_quantile(0.99, sum by (channel, le) (rate(slotgate_x_bucket{channel=~"$channel"}[$__rate_interval])))',
      ),
    ).toEqual(['slotgate_x_bucket']);
    expect(metricNames('max by (channel) (a_b{c="d"}) / on (channel) group_left c_d > 0.5e3')).toEqual([
      'a_b',
      'c_d',
    ]);
    expect(metricNames('sum(increase(x_total[5m])) or vector(0)')).toEqual(['x_total']);
  });

  it('every metric its panels and variables query exists in /metrics', async () => {
    const gw = await startGateway(
      configDoc({
        channels: [{ id: 'mock', type: 'mock', models: ['m'], max_concurrency: 2, mock: { latency_ms: 0 } }],
      }),
    );
    cleanups.push(() => gw.close());
    expect((await call(`${gw.url}/v1/chat/completions`, { headers: CLIENT, body: chat('m') })).status).toBe(
      200,
    );
    const scrape = await call(`${gw.url}/metrics`);
    expect(scrape.status).toBe(200);
    const exp = parsePrometheusText(scrape.text);

    const dashboard = JSON.parse(DASHBOARD_TEXT) as Dashboard;
    const used = new Set(expressions(dashboard).flatMap((e) => metricNames(e.expr)));
    // what the issue asks the dashboard to show is there (so this test cannot pass on an empty dashboard)
    expect([...used]).toEqual(
      expect.arrayContaining([
        'slotgate_channel_in_flight',
        'slotgate_channel_in_flight_peak',
        'slotgate_channel_max_concurrency',
        'slotgate_admissions_total',
        'slotgate_wait_duration_seconds_bucket',
        'slotgate_upstream_responses_total',
        'slotgate_upstream_ttfb_seconds_bucket',
        'slotgate_upstream_duration_seconds_bucket',
        'slotgate_upstream_retries_total',
        'slotgate_cooldowns_total',
        'slotgate_redis_node_up',
        'slotgate_redis_node_latency_seconds',
      ]),
    );
    for (const { where, expr } of expressions(dashboard)) expect(expr.trim(), where).not.toBe('');
    expect(missing(dashboard, exp)).toEqual([]);

    // the check has teeth: one misspelt name in one panel is reported
    const broken = JSON.parse(
      DASHBOARD_TEXT.replace('slotgate_upstream_retries_total', 'slotgate_upstream_retry_total'),
    ) as Dashboard;
    expect(missing(broken, exp)).toEqual([expect.stringMatching(/^slotgate_upstream_retry_total \(panel "/)]);
  });
});
