import { definePlugin, PLUGIN_API_VERSION, type ProbeResult } from '@te/connector';
import { loadBinding, PLUGIN_NAME } from './binding.js';
import { ptraceScope } from './locality.js';
import { shmOptions } from './options.js';
import { createShmTransport } from './transport.js';

export { shmOptions, type ShmOptions } from './options.js';
export { MooncakeShmTransport, createShmTransport } from './transport.js';
export type { ShmEndpoint } from './endpoint.js';

export const VERSION = '0.1.0';

function probe(): ProbeResult {
  if (process.platform !== 'linux') return { available: false, reason: `${PLUGIN_NAME} needs Linux (process_vm_readv/writev, abstract unix sockets, memfd)` };
  try {
    const native = loadBinding();
    const scope = ptraceScope();
    // Scope 2 leaves attaching to CAP_SYS_PTRACE, scope 3 to nobody: the target could not copy.
    const root = process.geteuid?.() === 0;
    if (scope === 3 || (scope === 2 && !root)) {
      return {
        available: false,
        reason: `Yama ptrace_scope is ${scope}: a target may not read or write its peers' memory (process_vm_readv needs ptrace access); set kernel.yama.ptrace_scope to 0, or use mooncake-tcp`,
      };
    }
    return {
      available: true,
      details: { protocolVersion: native.protocolVersion, ptraceScope: scope ?? 'no Yama', copy: 'process_vm_readv/writev by the target' },
    };
  } catch (e) {
    return { available: false, reason: (e as Error).message };
  }
}

/** mooncake-shm: same-host one-sided READ/WRITE; the target copies with process_vm_readv/writev. */
export default definePlugin({
  apiVersion: PLUGIN_API_VERSION,
  name: PLUGIN_NAME,
  version: VERSION,
  capabilities: {
    class: 'same-host',
    memoryKinds: ['cpu'],
    read: true,
    notifications: true,
    maxInFlight: 4096,
    rawAddresses: true,
  },
  options: shmOptions,
  probe,
  create: createShmTransport,
});
