#!/usr/bin/env node
// The `te` command. npm links bins at install time, before any build, so the link points
// at this committed file, which loads the build and says how to make it when it is missing.
import { existsSync } from 'node:fs';
import { fileURLToPath } from 'node:url';

const built = new URL('../dist/te.js', import.meta.url);
if (!existsSync(fileURLToPath(built))) {
  console.error(
    'te: the te command is not built yet (packages/cli/dist/te.js is missing).\n    In the te repository run `npm run build` (or `npm start`, which builds first); an installed @te/cli package ships its build.',
  );
  process.exit(1);
}
await import(built.href);
