import { definePlugin, PLUGIN_API_VERSION, type ProbeResult } from '@te/connector';
import { loadBinding, PLUGIN_NAME } from './binding.js';
import { tcpOptions } from './options.js';
import { createTcpTransport } from './transport.js';

export { tcpOptions, type TcpOptions } from './options.js';
export { MooncakeTcpTransport, createTcpTransport, type TcpEndpoint } from './transport.js';

export const VERSION = '0.1.0';

function probe(): ProbeResult {
  try {
    const native = loadBinding();
    return { available: true, details: { protocolVersion: native.protocolVersion, cuda: false, authentication: 'hmac-sha256 (built in)' } };
  } catch (e) {
    return { available: false, reason: (e as Error).message };
  }
}

/** mooncake-tcp: one-sided READ/WRITE over persistent multi-lane TCP connections. */
export default definePlugin({
  apiVersion: PLUGIN_API_VERSION,
  name: PLUGIN_NAME,
  version: VERSION,
  capabilities: {
    class: 'tcp',
    memoryKinds: ['cpu'],
    read: true,
    notifications: true,
    maxInFlight: 8192,
    rawAddresses: true,
  },
  options: tcpOptions,
  probe,
  create: createTcpTransport,
});
