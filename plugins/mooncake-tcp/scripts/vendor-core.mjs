// Before `npm pack`: copies the shared C++ core (repo-root native/) into native/te-core so the
// packed plugin builds on its own. CMakeLists.txt prefers native/te-core when it exists.
import { cpSync, existsSync, rmSync } from 'node:fs';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';

const root = join(dirname(fileURLToPath(import.meta.url)), '..');
const core = join(root, '..', '..', 'native');
const dest = join(root, 'native', 'te-core');
if (!existsSync(core)) process.exit(0);
rmSync(dest, { recursive: true, force: true });
for (const part of ['CMakeLists.txt', 'cmake', 'include', 'src']) cpSync(join(core, part), join(dest, part), { recursive: true });
