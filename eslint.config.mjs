// ESLint flat config for every TypeScript and JavaScript source of the monorepo.
// Size limits: a function over 80 lines or a file over 500 lines is reported; where one is
// long on purpose, disable the rule for it with a reason after `--`, e.g.
//   /* eslint-disable max-lines -- the wire format's every message, kept in one table */
// test/structure.test.ts enforces the same limits (with its listed allowances) in `npm test`.
import js from '@eslint/js';
import globals from 'globals';
import tseslint from 'typescript-eslint';

export default tseslint.config(
  {
    ignores: [
      '**/node_modules/**',
      '**/dist/**',
      '**/build/**',
      '.nx/**',
      'tmp/**',
      'fuzz/corpus/**',
      'fuzz/crashes/**',
      '**/native/te-core/**',
      '**/native/te-fabric/**',
      '**/native/te-cuda/**',
    ],
  },
  {
    linterOptions: { reportUnusedDisableDirectives: 'error' },
    languageOptions: { globals: { ...globals.node } },
  },
  js.configs.recommended,
  ...tseslint.configs.recommended,
  {
    files: ['**/*.{ts,mts,cts,js,mjs,cjs}'],
    rules: {
      'max-lines': ['warn', { max: 500 }],
      'max-lines-per-function': ['warn', { max: 80 }],
      // A ternary or && that calls one of two functions is a statement here (`ok ? resolve() : reject()`).
      '@typescript-eslint/no-unused-expressions': ['error', { allowShortCircuit: true, allowTernary: true }],
      // `_name` marks a parameter or binding that is deliberately unused (a callback's shape).
      '@typescript-eslint/no-unused-vars': ['error', { argsIgnorePattern: '^_', varsIgnorePattern: '^_', caughtErrors: 'none' }],
    },
  },
  {
    // Tests, fixtures, benchmarks and fuzz harnesses reach into untyped internals (a peer's
    // private state, a forked child's messages): `any` is reported there, not refused.
    files: ['test/**', '**/test/**', 'bench/**', 'fuzz/**', 'scripts/**'],
    rules: { '@typescript-eslint/no-explicit-any': 'warn' },
  },
  {
    // CommonJS fixtures and loaders use require().
    files: ['**/*.cjs'],
    languageOptions: { sourceType: 'commonjs' },
    rules: { '@typescript-eslint/no-require-imports': 'off' },
  },
);
