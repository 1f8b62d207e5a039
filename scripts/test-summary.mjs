#!/usr/bin/env node
// Prints one closing line over every package's uvu run (see scripts/uvu.mjs).
import { existsSync, readFileSync } from 'node:fs';
import { parseCli } from './lib/cli.mjs';

const { positionals } = parseCli({
  usage: 'node scripts/test-summary.mjs <summary.jsonl>',
  summary: 'Prints one closing line over the per-package counts scripts/uvu.mjs appended to the file; exit 1 when a test failed or none ran.',
  allowPositionals: true,
});
const file = positionals[0] ?? '';
const rows = existsSync(file)
  ? readFileSync(file, 'utf8')
      .trim()
      .split('\n')
      .filter(Boolean)
      .map((l) => JSON.parse(l))
  : [];
const sum = (k) => rows.reduce((acc, r) => acc + (Number.isFinite(r[k]) ? r[k] : 0), 0);
// Each row's time is uvu's own Duration (the tests, without the build before them).
const time = (r) => (Number.isFinite(r.seconds) ? `${String(r.seconds).padStart(5)} s  ` : '         ');
for (const r of rows) console.log(`  ${r.where.padEnd(32)} ${time(r)}${r.passed}/${r.total} passed${r.skipped ? `, ${r.skipped} skipped` : ''}`);
console.log(`${sum('passed')} passed, ${sum('failed')} failed, ${sum('skipped')} skipped`);
process.exitCode = rows.length === 0 || sum('failed') > 0 ? 1 : 0;
