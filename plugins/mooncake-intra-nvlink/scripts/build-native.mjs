// Builds the Node-API addon with cmake-js, offline (Node-API headers from node-api-headers,
// never a download: see "binary.napi_versions" in package.json). Incremental: cmake-js
// `compile` reuses build/ when it is configured already.
import { spawnSync } from 'node:child_process';
import { existsSync } from 'node:fs';
import { createRequire } from 'node:module';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';

const root = join(dirname(fileURLToPath(import.meta.url)), '..');
const require = createRequire(join(root, 'package.json'));
const cli = join(dirname(require.resolve('cmake-js/package.json')), 'bin', 'cmake-js');
const configured = existsSync(join(root, 'build', 'CMakeCache.txt'));
const args = [cli, configured ? 'compile' : 'build', '--out', 'build', '--config', 'Release'];
if (process.env.TE_NATIVE_DEBUG === '1') args.splice(2, 0, '--debug');
const r = spawnSync(process.execPath, args, { cwd: root, stdio: 'inherit' });
if (r.status !== 0) {
  console.error('[@te/mooncake-intra-nvlink] native build failed: needs cmake >= 3.18 and a C++17 compiler (Debian: apt-get install -y cmake g++)');
  process.exit(r.status ?? 1);
}
