// Before `npm pack`: copies the shared C++ core (repo-root native/) into native/te-core and
// the libfabric layer (native/fabric/) into native/te-fabric, so the packed plugin builds on
// its own. CMakeLists.txt prefers the vendored copies when they exist.
import { cpSync, existsSync, rmSync } from 'node:fs';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';

const root = join(dirname(fileURLToPath(import.meta.url)), '..');
const core = join(root, '..', '..', 'native');
if (!existsSync(core)) process.exit(0);
const dest = join(root, 'native', 'te-core');
rmSync(dest, { recursive: true, force: true });
for (const part of ['CMakeLists.txt', 'cmake', 'include', 'src']) cpSync(join(core, part), join(dest, part), { recursive: true });
const fabricDest = join(root, 'native', 'te-fabric');
rmSync(fabricDest, { recursive: true, force: true });
for (const part of ['CMakeLists.txt', 'include', 'src']) cpSync(join(core, 'fabric', part), join(fabricDest, part), { recursive: true });
