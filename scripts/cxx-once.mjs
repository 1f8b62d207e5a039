#!/usr/bin/env node
// Runs a package's C++ test command, except in CI, where each C++ test runs once, in its
// sanitizer step (scripts/sanitize.sh), which builds and runs every one of them under
// ThreadSanitizer (several under AddressSanitizer + UBSan too): .ci/run sets
// TE_CI_CXX_IN_SANITIZERS=1 for its npm test, and the second Node.js line
// (TE_CI_SECOND_NODE=1, scripts/ci-second-node.sh) has nothing to add, since C++ tests do
// not load Node.js. Skipped, the line says why instead.
import { spawnSync } from 'node:child_process';

// The command's own options pass through untouched: only a leading --help is this script's.
const command = process.argv.slice(2);
if (command[0] === '--help' || command[0] === '-h' || command.length === 0) {
  (command.length === 0 ? console.error : console.log)(
    "usage: node scripts/cxx-once.mjs <command> [args...]\n\nRuns a package's C++ test command; in CI's second Node.js line (TE_CI_SECOND_NODE=1) prints why it is not run again and exits 0.",
  );
  process.exit(command.length === 0 ? 2 : 0);
}
if (process.env.TE_CI_CXX_IN_SANITIZERS === '1') {
  console.log(`  skipped C++ tests "${command.join(' ')}": this CI builds and runs every C++ test in its sanitizer step (scripts/sanitize.sh)`);
  process.exit(0);
}
if (process.env.TE_CI_SECOND_NODE === '1') {
  console.log(`  skipped C++ tests "${command.join(' ')}": they do not load Node.js; run once per CI, in its first Node.js line (scripts/ci-second-node.sh)`);
  process.exit(0);
}
const r = spawnSync(command[0], command.slice(1), { stdio: 'inherit' });
process.exit(r.status ?? 1);
