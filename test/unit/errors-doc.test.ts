/**
 * docs/errors.md is the error-code catalogue: it must list every code the gateway answers with (GATEWAY_ERRORS) and
 * every code the library raises (ERROR_CODES), with the status and types the code really uses, an operator action for
 * every gateway code, and no code that no longer exists.
 */
import { readFileSync } from 'node:fs';
import { describe, expect, it } from 'vitest';
import { ERROR_CODES } from '../../packages/slotgate/src/core/errors.js';
import { GATEWAY_ERRORS } from '../../packages/gateway/src/http-errors.js';

const doc = readFileSync(new URL('../../docs/errors.md', import.meta.url), 'utf8');

/** The text under one `## heading`, up to the next `## `. */
function section(heading: string): string {
  const start = doc.indexOf(`\n## ${heading}\n`);
  if (start < 0) throw new Error(`docs/errors.md has no "## ${heading}" section`);
  const end = doc.indexOf('\n## ', start + 1);
  return doc.slice(start, end < 0 ? undefined : end);
}

/** The body rows of the section's table: the cells of each, trimmed, backticks kept. */
function rows(heading: string): string[][] {
  const lines = section(heading)
    .split('\n')
    .filter((l) => l.trim().startsWith('|'));
  expect(lines.length, `a table under "${heading}"`).toBeGreaterThan(2);
  return lines.slice(2).map((l) =>
    l
      .trim()
      .replace(/^\||\|$/g, '')
      .split('|')
      .map((c) => c.trim()),
  );
}

/** `code` → code; anything else is a malformed row. */
function codeOf(cell: string | undefined): string {
  const m = /^`([a-z_]+)`$/.exec(cell ?? '');
  if (!m)
    throw new Error(`docs/errors.md: expected a \`code\` in the first column, got ${JSON.stringify(cell)}`);
  return m[1]!;
}

const unwrap = (cell: string | undefined) => (cell ?? '').replace(/^`|`$/g, '');

function expectSameCodes(documented: string[], inCode: string[], what: string): void {
  const missing = inCode.filter((c) => !documented.includes(c));
  const stale = documented.filter((c) => !inCode.includes(c));
  expect(missing, `${what} codes missing from docs/errors.md`).toEqual([]);
  expect(stale, `codes in docs/errors.md that ${what} no longer has`).toEqual([]);
  expect(new Set(documented).size, `each ${what} code documented once`).toBe(documented.length);
}

describe('docs/errors.md', () => {
  it('lists exactly the gateway codes, with the status and both types the code uses', () => {
    const table = rows('Gateway error codes');
    const codes = table.map((r) => codeOf(r[0]));
    expectSameCodes(codes, Object.keys(GATEWAY_ERRORS), 'GATEWAY_ERRORS');
    for (const row of table) {
      const spec = GATEWAY_ERRORS[codeOf(row[0]) as keyof typeof GATEWAY_ERRORS];
      expect({
        code: row[0],
        status: Number(row[1]),
        type: unwrap(row[2]),
        anthropicType: unwrap(row[3]),
      }).toEqual({
        code: row[0],
        status: spec.status,
        type: spec.type,
        anthropicType: spec.anthropicType,
      });
      expect(row[5]!.length, `a meaning for ${row[0]}`).toBeGreaterThan(20);
    }
  });

  it('names the Retry-After header exactly for the codes that send it', () => {
    const withHeader = rows('Gateway error codes')
      .filter((r) => /Retry-After/.test(r[4] ?? ''))
      .map((r) => codeOf(r[0]));
    expect(withHeader.sort()).toEqual([
      'admission_store_unavailable',
      'channel_capacity_exhausted',
      'client_concurrency_exceeded',
      'lease_lost',
      'shutting_down',
    ]);
  });

  it('lists exactly the library codes', () => {
    const table = rows('Library error codes');
    expectSameCodes(
      table.map((r) => codeOf(r[0])),
      Object.keys(ERROR_CODES),
      'ERROR_CODES',
    );
    // each library code's gateway answer is a real gateway code
    for (const row of table) {
      const answer = /`([a-z_]+)`/.exec(row[2] ?? '')?.[1];
      expect(Object.keys(GATEWAY_ERRORS), `gateway answer of ${row[0]}`).toContain(answer);
    }
  });

  it('says what an operator should do for every gateway code', () => {
    const table = rows('What an operator should do');
    expectSameCodes(
      table.map((r) => codeOf(r[0])),
      Object.keys(GATEWAY_ERRORS),
      'GATEWAY_ERRORS',
    );
    for (const row of table) expect(row[1]!.length, `an action for ${row[0]}`).toBeGreaterThan(20);
  });
});
