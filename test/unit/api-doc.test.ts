/**
 * docs/api.md stays in step with the public entries: every name either package exports is documented on the page
 * by name, so nothing is exported by accident or left undocumented.
 */
import { readFileSync } from 'node:fs';
import ts from 'typescript';
import { describe, expect, it } from 'vitest';

const root = new URL('../../', import.meta.url);
const DOC = readFileSync(new URL('docs/api.md', root), 'utf8');

/** The names a module exports, read from its source (re-exports included, `as` renames resolved). */
function exportedNames(path: string): string[] {
  const source = ts.createSourceFile(path, readFileSync(new URL(path, root), 'utf8'), ts.ScriptTarget.ES2022);
  const names: string[] = [];
  source.forEachChild((node) => {
    if (ts.isExportDeclaration(node) && node.exportClause && ts.isNamedExports(node.exportClause)) {
      for (const element of node.exportClause.elements) names.push(element.name.text);
    }
  });
  return names;
}

describe('docs/api.md', () => {
  it.each(['packages/slotgate/src/index.ts', 'packages/gateway/src/index.ts'])(
    'documents every export of %s',
    (entry) => {
      const names = exportedNames(entry);
      expect(names.length).toBeGreaterThan(10);
      const missing = names.filter((name) => !new RegExp(`\\b${name}\\b`).test(DOC));
      expect(missing).toEqual([]);
    },
  );
});
