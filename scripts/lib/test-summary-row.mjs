// The row per suite that scripts/uvu.mjs and scripts/uvu-parallel.mjs append to TE_TEST_SUMMARY,
// which scripts/test-summary.mjs prints as the root summary.
import { appendFileSync } from 'node:fs';
import { dirname, relative } from 'node:path';

/** What the row and the runner's messages call this suite: TE_TEST_WHERE, else the package's folder, else the cross-package tests. */
export function suiteName() {
  const root = process.env.TE_TEST_SUMMARY ? dirname(process.env.TE_TEST_SUMMARY) : process.cwd();
  return process.env.TE_TEST_WHERE || relative(root, process.cwd()) || 'test (cross-package)';
}

/** Appends `row` ({ where, total, passed, skipped, failed, seconds }) to TE_TEST_SUMMARY, where it is set. */
export function appendSummaryRow(row) {
  if (process.env.TE_TEST_SUMMARY) appendFileSync(process.env.TE_TEST_SUMMARY, `${JSON.stringify(row)}\n`);
}
