#!/usr/bin/env node
// Writes docs/config.schema.json from @te/connector's config schema (the one definition
// validateConfig uses). packages/connector/test/config-schema.test.ts fails when it is stale.
import { writeFileSync } from 'node:fs';
import { ConfigInputSchema } from '@te/connector';
import { parseCli } from './lib/cli.mjs';

parseCli({
  usage: 'node scripts/config-schema.mjs',
  summary: "Writes docs/config.schema.json from @te/connector's config schema (needs the built packages).",
});

const out = new URL('../docs/config.schema.json', import.meta.url);
writeFileSync(out, `${JSON.stringify({ $schema: 'https://json-schema.org/draft/2020-12/schema', ...ConfigInputSchema }, null, 2)}\n`);
console.log(`wrote ${out.pathname}`);
