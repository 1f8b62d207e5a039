// The native build steps every transport plugin shares, run from the plugin's folder
// through its scripts/native.mjs:
//   build   compile the Node-API addon with cmake-js, offline and incremental
//           (Node-API headers come from node-api-headers, see "binary.napi_versions")
//   vendor  before `npm pack`: copy the shared C++ core, and the layers the plugin lists in
//           package.json "teNative.layers" (e.g. ["fabric"], ["cuda"]), into native/te-core
//           and native/te-<layer>, so the packed plugin builds on its own
//   unvendor after `npm pack` in the repository: remove those copies again, so later builds
//           compile the repository's native/ and not a stale snapshot of it
import { spawnSync } from 'node:child_process';
import { cpSync, existsSync, readdirSync, readFileSync, rmSync, statSync, writeFileSync } from 'node:fs';
import { createRequire } from 'node:module';
import { availableParallelism } from 'node:os';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { wantedNativeDeps } from './native-deps.mjs';

const pluginRoot = process.cwd();
const pkg = JSON.parse(readFileSync(join(pluginRoot, 'package.json'), 'utf8'));
const coreRoot = join(dirname(fileURLToPath(import.meta.url)), '..');

function build() {
  const require = createRequire(join(pluginRoot, 'package.json'));
  const cli = join(dirname(require.resolve('cmake-js/package.json')), 'bin', 'cmake-js');
  const configured = existsSync(join(pluginRoot, 'build', 'CMakeCache.txt'));
  // cmake's default generator compiles one file at a time, and npm runs the install scripts
  // of several plugins one after another: use every core (TE_BUILD_JOBS overrides).
  const wanted = process.env.TE_BUILD_JOBS;
  if (wanted !== undefined && wanted !== '' && !/^[1-9]\d{0,3}$/.test(wanted)) {
    console.error(`[${pkg.name}] TE_BUILD_JOBS must be a whole number of compile jobs from 1 to 9999 (got ${JSON.stringify(wanted)})`);
    process.exit(2);
  }
  const jobs = wanted ? Number(wanted) : availableParallelism();
  // CMake's unity build: the sources of a target are compiled in batches of up to 8 as one
  // translation unit, so the shared headers (the standard library, Node-API, libfabric) are
  // parsed once per batch, not once per file. Installing the six plugins on 2 cores: 117 s
  // file by file, 92 s in batches. TE_UNITY_BUILD=0 compiles file by file (a compiler error
  // then points at one source, not a batch); setting it either way reconfigures.
  const unity = process.env.TE_UNITY_BUILD;
  if (unity !== undefined && unity !== '' && unity !== '0' && unity !== '1') {
    console.error(`[${pkg.name}] TE_UNITY_BUILD must be 1 (sources compiled in batches, the default) or 0 (file by file), got ${JSON.stringify(unity)}`);
    process.exit(2);
  }
  const deps = optionalDeps();
  const reconfigure = !configured || (unity !== undefined && unity !== '') || deps.changed.length > 0;
  for (const why of deps.changed) console.error(`[${pkg.name}] ${why}: configuring the native build again`);
  const common = ['--out', 'build', '--config', 'Release', '--parallel', String(jobs)];
  if (process.env.TE_NATIVE_DEBUG === '1') common.unshift('--debug');
  const configure = ['configure', ...common, `--CDCMAKE_UNITY_BUILD=${unity === '0' ? 'OFF' : 'ON'}`, ...deps.defines];
  const steps = reconfigure ? [configure, ['compile', ...common]] : [['compile', ...common]];
  dropForeignAddons();
  for (const step of steps) {
    const r = spawnSync(process.execPath, [cli, ...step], { cwd: pluginRoot, stdio: 'inherit' });
    if (r.status !== 0) {
      console.error(`[${pkg.name}] native build failed: needs cmake >= 3.18 and a C++17 compiler (Debian: apt-get install -y cmake g++)`);
      process.exit(r.status ?? 1);
    }
  }
  stampAddons();
}

// What this build folder last linked: each addon's size and mtime. nx's build cache restores
// build/Release (its outputs) and not the objects and CMake cache beside it, with a new
// mtime, so ninja takes a restored addon for up to date ("no work to do") even where it came
// from another configuration (a build without libfabric) and doctor's rebuild command would
// change nothing. An addon this folder did not link is removed before the compile, which
// links it again from this folder's objects.
const addonDir = join(pluginRoot, 'build', 'Release');
const stampFile = join(pluginRoot, 'build', 'te-linked-addons.json');

function addons() {
  if (!existsSync(addonDir)) return {};
  const out = {};
  for (const f of readdirSync(addonDir).filter((n) => n.endsWith('.node'))) {
    const st = statSync(join(addonDir, f));
    out[f] = `${st.size}:${st.mtimeMs}`;
  }
  return out;
}

function dropForeignAddons() {
  if (!existsSync(stampFile)) return;
  let linked;
  try {
    linked = JSON.parse(readFileSync(stampFile, 'utf8'));
  } catch {
    linked = {};
  }
  for (const [file, seen] of Object.entries(addons())) {
    if (linked[file] === seen) continue;
    console.error(`[${pkg.name}] build/Release/${file} is not the one this build folder linked (restored from a cache?): linking it again`);
    rmSync(join(addonDir, file), { force: true });
  }
}

function stampAddons() {
  writeFileSync(stampFile, `${JSON.stringify(addons())}\n`);
}

/**
 * The optional dependencies of the layers this plugin uses (libfabric for fabric, the CUDA
 * toolkit for cuda): the CMake switches that honour TE_FABRIC_DISABLE / TE_WITH_CUDA, and,
 * for an existing build, why it must be configured again. CMake caches what it found, and a
 * compile alone never looks again: a build configured before libfabric was installed stayed
 * without it ("ninja: no work to do") until its build folder was deleted.
 */
function optionalDeps() {
  const layers = pkg.teNative?.layers ?? [];
  let wanted;
  try {
    wanted = wantedNativeDeps();
  } catch (e) {
    console.error(`[${pkg.name}] ${e.message}`);
    process.exit(2);
  }
  const cacheFile = join(pluginRoot, 'build', 'CMakeCache.txt');
  const cache = new Map();
  if (existsSync(cacheFile)) {
    for (const line of readFileSync(cacheFile, 'utf8').split('\n')) {
      const m = /^([\w-]+):[A-Z]+=(.*)$/.exec(line);
      if (m) cache.set(m[1], m[2]);
    }
  }
  const found = (name) => cache.has(name) && cache.get(name) !== '' && !cache.get(name).endsWith('-NOTFOUND');
  const on = (name, dflt) => (cache.has(name) ? /^(ON|1|TRUE|YES)$/i.test(cache.get(name)) : dflt);
  const defines = [];
  const changed = [];
  if (layers.includes('fabric')) {
    defines.push(`--CDTE_FABRIC_DISABLE=${wanted.fabric ? 'OFF' : 'ON'}`);
    const had = !on('TE_FABRIC_DISABLE', false) && found('TE_LIBFABRIC_LIB') && found('TE_LIBFABRIC_INCLUDE');
    if (cache.size > 0 && had !== wanted.fabric)
      changed.push(
        wanted.fabric ? 'configured without libfabric, which is there now' : 'configured with libfabric, which is gone or disabled (TE_FABRIC_DISABLE=1)',
      );
  }
  if (layers.includes('cuda')) {
    defines.push(`--CDTE_WITH_CUDA=${wanted.cuda ? 'ON' : 'OFF'}`);
    const had = on('TE_WITH_CUDA', true) && found('CUDA_CUDART') && found('CUDAToolkit_BIN_DIR');
    if (cache.size > 0 && had !== wanted.cuda)
      changed.push(
        wanted.cuda
          ? 'configured without the CUDA toolkit, which is there now'
          : 'configured with the CUDA toolkit, which is gone or disabled (TE_WITH_CUDA=0)',
      );
  }
  return { defines, changed };
}

function vendor() {
  // Inside a packed plugin the core is already vendored: nothing to do.
  if (coreRoot.startsWith(join(pluginRoot, 'native'))) return;
  const copy = (from, dest, parts) => {
    rmSync(dest, { recursive: true, force: true });
    for (const part of parts) if (existsSync(join(from, part))) cpSync(join(from, part), join(dest, part), { recursive: true });
  };
  copy(coreRoot, join(pluginRoot, 'native', 'te-core'), ['CMakeLists.txt', 'cmake', 'include', 'src', 'scripts', 'third_party']);
  for (const layer of pkg.teNative?.layers ?? []) copy(join(coreRoot, layer), join(pluginRoot, 'native', `te-${layer}`), ['CMakeLists.txt', 'include', 'src']);
}

function unvendor() {
  // Only in the repository (its native/ beside plugins/): a published plugin keeps its copy.
  if (!existsSync(join(pluginRoot, '..', '..', 'native', 'scripts', 'plugin-native.mjs'))) return;
  for (const name of ['te-core', ...(pkg.teNative?.layers ?? []).map((l) => `te-${l}`)]) {
    rmSync(join(pluginRoot, 'native', name), { recursive: true, force: true });
  }
}

const command = process.argv[2];
if (command === 'build') build();
else if (command === 'vendor') vendor();
else if (command === 'unvendor') unvendor();
else {
  console.error(`usage: node scripts/native.mjs build|vendor|unvendor (got ${JSON.stringify(command)})`);
  process.exit(2);
}
