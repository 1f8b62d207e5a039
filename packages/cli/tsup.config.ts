import { defineConfig } from 'tsup';

export default defineConfig({
  entry: ['src/te.ts', 'src/index.ts'],
  format: ['esm'],
  dts: { entry: 'src/index.ts' },
  sourcemap: true,
  clean: true,
  target: 'node20',
  external: [/^@te\//],
});
