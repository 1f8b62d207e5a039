import { test } from 'uvu';
import * as assert from 'uvu/assert';
import { isTransferError, parseEnvBoolean, parseOptions, type OptionsSchema } from '../src/index.js';

const schema = {
  threads: { type: 'integer', default: 2, min: 1, max: 64, env: 'T_THREADS', description: 'I/O threads' },
  ratio: { type: 'number', default: 0.5, min: 0, max: 1, description: 'a ratio' },
  name: { type: 'string', env: 'T_NAME', description: 'a name' },
  fast: { type: 'boolean', default: false, env: 'T_FAST', description: 'go fast' },
  mode: { type: 'enum', values: ['a', 'b'], default: 'a', description: 'mode' },
  nics: { type: 'list', default: [], env: 'T_NICS', description: 'devices' },
} satisfies OptionsSchema;

test('defaults fill absent options', () => {
  const o = parseOptions(schema, {}, {});
  assert.equal(o, { threads: 2, ratio: 0.5, fast: false, mode: 'a', nics: [] });
});

test('explicit values win over the environment, which wins over defaults', () => {
  const env = { T_THREADS: '8', T_FAST: 'yes', T_NICS: 'mlx5_0, mlx5_1', T_NAME: 'n' };
  assert.equal(parseOptions(schema, { threads: 4 }, env).threads, 4);
  const o = parseOptions(schema, {}, env);
  assert.is(o.threads, 8);
  assert.is(o.fast, true);
  assert.equal(o.nics, ['mlx5_0', 'mlx5_1']);
  assert.is(o.name, 'n');
});

const bad: [string, Record<string, unknown>, Record<string, string>, RegExp][] = [
  ['integer below min', { threads: 0 }, {}, /Expected option `threads` to be an integer between 1 and 64, got 0/],
  ['fraction for integer', { threads: 1.5 }, {}, /to be an integer/],
  ['string for number', { ratio: 'x' }, {}, /Expected option `ratio` to be a number between 0 and 1, got "x"/],
  ['bad enum', { mode: 'c' }, {}, /Expected option `mode` to be one of "a", "b", got "c"/],
  ['non-boolean', { fast: 1 }, {}, /Expected option `fast` to be a boolean, got 1/],
  ['unknown option', { thread: 1 }, {}, /Unknown option `thread`; known options: `threads`/],
  ['env not a number', {}, { T_THREADS: 'many' }, /T_THREADS to be a number, got "many"/],
  ['env out of range', {}, { T_THREADS: '999' }, /between 1 and 64, got 999 \(from environment variable T_THREADS\)/],
  ['env not a boolean', {}, { T_FAST: 'maybe' }, /T_FAST to be a boolean/],
];
for (const [name, input, env, message] of bad) {
  test(`refused with a precise message: ${name}`, () => {
    try {
      parseOptions(schema, input, env, 'demo');
      assert.unreachable('should have thrown');
    } catch (e) {
      assert.ok(isTransferError(e, 'INVALID_CONFIG'), String(e));
      assert.match((e as Error).message, message);
      assert.is((e as { plugin?: string }).plugin, 'demo');
    }
  });
}

test('parseEnvBoolean accepts the usual spellings', () => {
  for (const t of ['1', 'true', 'TRUE', 'yes', 'on']) assert.is(parseEnvBoolean('X', t), true);
  for (const f of ['0', 'false', 'no', 'off', '']) assert.is(parseEnvBoolean('X', f), false);
  assert.throws(() => parseEnvBoolean('X', '2'), /X to be a boolean/);
});

test.run();
