import { defineConfig } from 'tsup';

export default defineConfig({
  entry: { te: 'src/te.ts', index: 'src/index.ts', 'demo-worker': 'src/demo/pipeline/worker.ts', 'pd-rank': 'src/bench/pd/rank.ts' },
  format: ['esm'],
  dts: { entry: 'src/index.ts' },
  sourcemap: true,
  clean: true,
  target: 'node20',
  external: [/^@te\//],
});
