/**
 * A strict parser of the Prometheus text exposition format (version 0.0.4), for tests that assert on /metrics:
 * every line is either a `# HELP`, a `# TYPE`, another comment, blank, or a sample `name{label="value",...} value`;
 * anything else throws, as does a sample of an undeclared family, a repeated series or a malformed label.
 */

export interface Sample {
  name: string;
  labels: Record<string, string>;
  value: number;
}

export interface Family {
  name: string;
  type: 'counter' | 'gauge' | 'histogram' | 'summary' | 'untyped';
  help: string;
  samples: Sample[];
}

export interface Exposition {
  families: Map<string, Family>;
  samples: Sample[];
}

const METRIC_NAME = /^[a-zA-Z_:][a-zA-Z0-9_:]*/;
const LABEL_NAME = /^[a-zA-Z_][a-zA-Z0-9_]*/;
const TYPES = new Set(['counter', 'gauge', 'histogram', 'summary', 'untyped']);

/** Values as Prometheus reads them (Go's ParseFloat): NaN and Inf in any case; prom-client writes NaN as `Nan`. */
function parseValue(text: string, line: string): number {
  if (/^[+]?inf(inity)?$/i.test(text)) return Infinity;
  if (/^-inf(inity)?$/i.test(text)) return -Infinity;
  if (/^nan$/i.test(text)) return NaN;
  if (!/^[-+]?(\d+\.?\d*|\.\d+)([eE][-+]?\d+)?$/.test(text)) throw new Error(`bad value in: ${line}`);
  return Number(text);
}

function parseLabels(text: string, line: string): { labels: Record<string, string>; rest: string } {
  const labels: Record<string, string> = {};
  let i = 1; // after '{'
  for (;;) {
    if (text[i] === '}') return { labels, rest: text.slice(i + 1) };
    const name = LABEL_NAME.exec(text.slice(i))?.[0];
    if (!name || text[i + name.length] !== '=' || text[i + name.length + 1] !== '"')
      throw new Error(`bad label in: ${line}`);
    if (name in labels) throw new Error(`label ${name} repeated in: ${line}`);
    i += name.length + 2;
    let value = '';
    for (;;) {
      const c = text[i];
      if (c === undefined) throw new Error(`unterminated label value in: ${line}`);
      if (c === '"') break;
      if (c === '\\') {
        const next = text[i + 1];
        if (next === 'n') value += '\n';
        else if (next === '\\' || next === '"') value += next;
        else throw new Error(`bad escape in: ${line}`);
        i += 2;
      } else {
        value += c;
        i++;
      }
    }
    labels[name] = value;
    i++; // closing quote
    if (text[i] === ',') i++;
    else if (text[i] !== '}') throw new Error(`expected , or } in: ${line}`);
  }
}

/** The family a sample name belongs to (histogram and summary series carry suffixes). */
function familyOf(name: string, families: Map<string, Family>): Family | undefined {
  const direct = families.get(name);
  if (direct) return direct;
  for (const suffix of ['_bucket', '_sum', '_count']) {
    if (!name.endsWith(suffix)) continue;
    const family = families.get(name.slice(0, -suffix.length));
    if (family?.type === 'histogram' || (family?.type === 'summary' && suffix !== '_bucket')) return family;
  }
  return undefined;
}

export function parsePrometheusText(text: string): Exposition {
  const families = new Map<string, Family>();
  const samples: Sample[] = [];
  const seen = new Set<string>();
  const family = (name: string): Family => {
    let f = families.get(name);
    if (!f) {
      f = { name, type: 'untyped', help: '', samples: [] };
      families.set(name, f);
    }
    return f;
  };
  for (const line of text.split('\n')) {
    if (line.trim() === '') continue;
    if (line.startsWith('#')) {
      const m = /^# (HELP|TYPE) ([a-zA-Z_:][a-zA-Z0-9_:]*) ?(.*)$/.exec(line);
      if (!m) continue; // a plain comment
      const f = family(m[2]!);
      if (m[1] === 'TYPE') {
        if (!TYPES.has(m[3]!)) throw new Error(`bad type in: ${line}`);
        if (f.samples.length) throw new Error(`TYPE after samples in: ${line}`);
        f.type = m[3] as Family['type'];
      } else {
        f.help = m[3]!.replace(/\\(n|\\)/g, (_, c: string) => (c === 'n' ? '\n' : '\\'));
      }
      continue;
    }
    const name = METRIC_NAME.exec(line)?.[0];
    if (!name) throw new Error(`bad sample line: ${line}`);
    let rest = line.slice(name.length);
    let labels: Record<string, string> = {};
    if (rest.startsWith('{')) ({ labels, rest } = parseLabels(rest, line));
    const fields = rest.trim().split(/\s+/);
    if (!rest.startsWith(' ') || fields.length < 1 || fields.length > 2)
      throw new Error(`bad sample line: ${line}`);
    const sample: Sample = { name, labels, value: parseValue(fields[0]!, line) };
    const owner = familyOf(name, families);
    if (!owner) throw new Error(`sample of an undeclared family: ${line}`);
    const series = `${name}${JSON.stringify(Object.entries(labels).sort())}`;
    if (seen.has(series)) throw new Error(`series repeated: ${line}`);
    seen.add(series);
    owner.samples.push(sample);
    samples.push(sample);
  }
  return { families, samples };
}

/** Samples named `name` whose labels include every given label. */
export function select(exp: Exposition, name: string, labels: Record<string, string> = {}): Sample[] {
  return exp.samples.filter(
    (s) => s.name === name && Object.entries(labels).every(([k, v]) => s.labels[k] === v),
  );
}

/** The value of exactly one sample; throws when there is none or more than one. */
export function valueOf(exp: Exposition, name: string, labels: Record<string, string> = {}): number {
  const found = select(exp, name, labels);
  if (found.length !== 1) {
    throw new Error(`expected one sample ${name}${JSON.stringify(labels)}, found ${found.length}`);
  }
  return found[0]!.value;
}
