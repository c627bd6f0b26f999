// What the README's "Try it" shows, read so that a test can hold it against what the CLI prints:
// the header lines of its tables, and the docs it lists.
import { readdirSync, readFileSync } from 'node:fs';
import { join } from 'node:path';
import { REPO_ROOT } from './harness.mjs';

const README = readFileSync(join(REPO_ROOT, 'README.md'), 'utf8');

/** A table's header: two or more capitalised words or phrases ("CAP/GPU", "IDLE FOR"), 2+ spaces apart. */
function headerOf(line) {
  const cells = line.trim().split(/\s{2,}/);
  const header = cells.length >= 2 && cells.every((cell) => /^[A-Z][A-Z/]*( [A-Z]+)*$/.test(cell));
  return header ? cells.join('  ') : undefined;
}

/** The header lines of the tables in `text` (the CLI's output), columns two spaces apart. */
export function tableHeaders(text) {
  return new Set(
    text
      .split('\n')
      .map(headerOf)
      .filter((header) => header !== undefined),
  );
}

/** The README's output blocks: fenced blocks without a language (commands are ```bash). */
export function readmeOutputs() {
  const blocks = [];
  let open; // the block being read: its language and lines
  for (const line of README.split('\n')) {
    if (open === undefined && line.startsWith('```')) open = { language: line.slice(3), lines: [] };
    else if (open !== undefined && line === '```') {
      if (open.language === '') blocks.push(open.lines.join('\n'));
      open = undefined;
    } else open?.lines.push(line);
  }
  return blocks;
}

/** The docs README's "Documentation" section links to. */
export function readmeDocs() {
  const section = README.split(/^## Documentation$/m)[1]?.split(/^## /m)[0] ?? '';
  return new Set([...section.matchAll(/\]\((docs\/[^)]+\.md)\)/g)].map((match) => match[1]));
}

/** Every docs/*.md. */
export function docsFiles() {
  return new Set(
    readdirSync(join(REPO_ROOT, 'docs'))
      .filter((name) => name.endsWith('.md'))
      .map((name) => `docs/${name}`),
  );
}
