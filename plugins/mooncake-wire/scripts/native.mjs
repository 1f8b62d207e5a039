// Runs the shared native build steps (native/scripts/plugin-native.mjs): `build` or `vendor`.
// Inside a packed plugin the core is vendored to native/te-core; in the repository it is ../../native.
import { existsSync } from 'node:fs';
const candidates = ['../native/te-core/scripts/plugin-native.mjs', '../../../native/scripts/plugin-native.mjs'].map((p) => new URL(p, import.meta.url));
await import(candidates.find((u) => existsSync(u)).href);
