import { test } from 'uvu';
import * as assert from 'uvu/assert';
import { readFileSync } from 'node:fs';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { NATIVE_STATUS } from '@te/connector';

// The native status header and the TypeScript table are two spellings of one list:
// a status added on one side only would reach users as INTERNAL.
const header = readFileSync(join(dirname(fileURLToPath(import.meta.url)), '..', 'native', 'include', 'te', 'status.h'), 'utf8');

test('native/include/te/status.h lists exactly NATIVE_STATUS', () => {
  const native = Object.fromEntries([...header.matchAll(/^\s*TE_([A-Z_]+)\s*=\s*(-?\d+),/gm)].map((m) => [m[1]!, Number(m[2])]));
  assert.ok(Object.keys(native).length > 10, 'header parsed');
  assert.equal(native, { ...NATIVE_STATUS });
});

test.run();
