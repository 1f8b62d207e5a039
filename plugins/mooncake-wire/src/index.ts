import { definePlugin, PLUGIN_API_VERSION, type ProbeResult } from '@te/connector';
import { loadBinding, PLUGIN_NAME } from './binding.js';
import { wireOptions } from './options.js';
import { createWireTransport } from './transport.js';

export { wireOptions, type WireOptions } from './options.js';
export { MooncakeWireTransport, createWireTransport, descriptorOf, type MooncakeEndpoint } from './transport.js';
export { parseSegment, encodeSegment, splitSegmentName, joinSegmentName, type MooncakeSegment, type MooncakeBuffer } from './segment.js';
export { HandshakeServer, handshake } from './handshake.js';
export { encodeFrame, decodeFrame, FrameReader, MSG_CONNECTION, MSG_METADATA, MSG_NOTIFY, MSG_PROBE, MSG_LEGACY } from './handshake-frame.js';
export { parseJson64, stringifyJson64, type Json64 } from './json64.js';
export { mooncakeKeys, rpcMetaValue, parseRpcMeta, type MooncakeKeys } from './etcd-keys.js';

export const VERSION = '0.1.0';

function probe(): ProbeResult {
  try {
    loadBinding();
    return {
      available: true,
      details: {
        speaks: 'Mooncake Transfer Engine TCP data path (v1 and v2 framing) and P2P handshake',
        authentication: 'none (Mooncake protocol); listener off unless `listen`',
      },
    };
  } catch (e) {
    return { available: false, reason: (e as Error).message };
  }
}

/** mooncake-wire: te as a Mooncake Transfer Engine peer over Mooncake's own TCP protocol. */
export default definePlugin({
  apiVersion: PLUGIN_API_VERSION,
  name: PLUGIN_NAME,
  version: VERSION,
  capabilities: {
    class: 'tcp',
    memoryKinds: ['cpu'],
    read: true,
    notifications: true,
    maxInFlight: 65536,
    rawAddresses: true,
  },
  options: wireOptions,
  probe,
  create: createWireTransport,
});
