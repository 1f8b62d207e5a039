// Bundles harness.ts and its @te/* dependencies into build/harness.mjs (or the path given), runnable with plain
// node on a machine without node_modules (the GPU machine). zeromq (native, used only by the
// engine's control plane, which the harness does not start) is replaced by a stub.
import { build } from 'esbuild';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';

const here = dirname(fileURLToPath(import.meta.url));
// The output path may be given (the test bundles into a temporary folder).
const outfile = process.argv[2] ?? join(here, 'build', 'harness.mjs');
const stub = {
  name: 'stub-native',
  setup(b) {
    b.onResolve({ filter: /^zeromq$/ }, () => ({ path: 'zeromq', namespace: 'stub' }));
    b.onLoad({ filter: /.*/, namespace: 'stub' }, () => ({
      contents:
        'class Unavailable { constructor() { throw new Error("zeromq is not bundled into the GPU harness"); } }\n' +
        'export class Dealer extends Unavailable {}\nexport class Router extends Unavailable {}\n' +
        'export function curveKeyPair() { throw new Error("zeromq is not bundled into the GPU harness"); }\n',
      loader: 'js',
    }));
  },
};
await build({
  entryPoints: [join(here, 'harness.ts')],
  outfile,
  bundle: true,
  platform: 'node',
  format: 'esm',
  target: 'node20',
  sourcemap: 'inline',
  external: ['msgpackr-extract', '*.node'],
  plugins: [stub],
  // CJS dependencies bundled into ESM need a require().
  banner: { js: "import { createRequire as __teCreateRequire } from 'node:module'; const require = __teCreateRequire(import.meta.url);" },
  logLevel: 'warning',
});
console.log(`bundled ${outfile}`);
