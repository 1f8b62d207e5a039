#!/usr/bin/env node
// What the optional native dependencies look like on this machine, as the native build sees
// them: libfabric (the fabric layer: mooncake-rdma, barex) and the CUDA toolkit (the cuda
// layer: mooncake-tcp's staging, mooncake-nvlink, mooncake-intra-nvlink), each after the
// switches that turn it off (TE_FABRIC_DISABLE=1, TE_WITH_CUDA=0).
//   - plugin-native.mjs compares this with what a plugin's build was configured with and
//     configures again when they differ (libfabric installed after the first build);
//   - run as a script it prints one line, a runtime input of nx's build cache (nx.json), so
//     a cached build made without libfabric is not restored once libfabric is there.
import { spawnSync } from 'node:child_process';
import { existsSync } from 'node:fs';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';

const LIB_DIRS = ['/usr/lib/x86_64-linux-gnu', '/usr/lib/aarch64-linux-gnu', '/usr/lib64', '/usr/lib', '/usr/local/lib', '/usr/local/lib64'];
const INCLUDE_DIRS = ['/usr/include', '/usr/local/include'];

/** Whether the build would find libfabric: pkg-config first, then the header and library where CMake looks. */
export function libfabricPresent() {
  const pc = spawnSync('pkg-config', ['--exists', 'libfabric'], { stdio: 'ignore' });
  if (pc.status === 0) return true;
  const header = INCLUDE_DIRS.some((d) => existsSync(join(d, 'rdma', 'fabric.h')));
  return header && LIB_DIRS.some((d) => existsSync(join(d, 'libfabric.so')));
}

/** Whether CMake's FindCUDAToolkit would find a toolkit: nvcc from CUDAToolkit_ROOT, CUDA_HOME, CUDA_PATH, PATH or /usr/local/cuda. */
export function cudaToolkitPresent() {
  const roots = [process.env.CUDAToolkit_ROOT, process.env.CUDA_HOME, process.env.CUDA_PATH, '/usr/local/cuda'].filter(Boolean);
  if (roots.some((r) => existsSync(join(r, 'bin', 'nvcc')))) return true;
  return (process.env.PATH ?? '').split(':').some((d) => d && existsSync(join(d, 'nvcc')));
}

/** A switch from the environment: '1' / '0', unset or empty for the default; anything else is refused. */
export function switchFromEnv(name) {
  const v = process.env[name];
  if (v === undefined || v === '') return undefined;
  if (v === '0' || v === '1') return v === '1';
  throw new Error(`${name} must be 1 or 0 (got ${JSON.stringify(v)})`);
}

/** What a build configured now would get: libfabric unless TE_FABRIC_DISABLE=1, CUDA unless TE_WITH_CUDA=0. */
export function wantedNativeDeps() {
  return {
    fabric: switchFromEnv('TE_FABRIC_DISABLE') !== true && libfabricPresent(),
    cuda: switchFromEnv('TE_WITH_CUDA') !== false && cudaToolkitPresent(),
  };
}

if (process.argv[1] === fileURLToPath(import.meta.url)) {
  if (process.argv[2] === '--help' || process.argv[2] === '-h') {
    console.log(
      'usage: node native/scripts/native-deps.mjs\n\nPrints which optional native dependencies a build configured now would use (libfabric, the CUDA toolkit).',
    );
    process.exit(0);
  }
  try {
    const w = wantedNativeDeps();
    console.log(`libfabric=${w.fabric ? 'yes' : 'no'} cuda=${w.cuda ? 'yes' : 'no'}`);
  } catch (e) {
    console.error(e.message);
    process.exit(2);
  }
}
