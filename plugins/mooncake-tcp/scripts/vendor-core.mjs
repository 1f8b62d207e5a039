// Before `npm pack`: copies the shared C++ core (repo-root native/) into native/te-core and
// the CUDA layer (native/cuda/) into native/te-cuda, so the packed plugin builds on its own.
// CMakeLists.txt prefers the vendored copies when they exist.
import { cpSync, existsSync, rmSync } from 'node:fs';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';

const root = join(dirname(fileURLToPath(import.meta.url)), '..');
const core = join(root, '..', '..', 'native');
if (!existsSync(core)) process.exit(0);
const copy = (from, dest, parts) => {
  rmSync(dest, { recursive: true, force: true });
  for (const part of parts) cpSync(join(from, part), join(dest, part), { recursive: true });
};
copy(core, join(root, 'native', 'te-core'), ['CMakeLists.txt', 'cmake', 'include', 'src']);
copy(join(core, 'cuda'), join(root, 'native', 'te-cuda'), ['CMakeLists.txt', 'include', 'src']);
