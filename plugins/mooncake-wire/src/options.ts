import type { OptionsOf, OptionsSchema } from '@te/connector';

/**
 * Runtime parameters of mooncake-wire (explicit config > environment > default). The
 * compatibility listeners are off unless `listen` is set: Mooncake's protocol has no
 * authentication, so serving it is a decision, never a default.
 */
export const wireOptions = {
  listen: {
    type: 'boolean',
    default: false,
    env: 'TE_MOONCAKE_WIRE_LISTEN',
    description:
      'Serve Mooncake initiators: a P2P handshake port and a data port, unauthenticated (see docs/security.md). Off: this process only initiates toward Mooncake targets',
  },
  bindAddress: {
    type: 'string',
    env: 'TE_MOONCAKE_WIRE_BIND',
    description:
      "IP address the two Mooncake listeners bind (default: the engine's bindAddress). Mooncake itself binds every interface; this plugin binds only where told",
  },
  advertiseHost: {
    type: 'string',
    env: 'TE_MOONCAKE_WIRE_ADVERTISE_HOST',
    description:
      'Host part of the Mooncake segment name (host:handshake-port) that Mooncake peers open and connect their data to (default: the bind address, or the first non-internal IPv4 address when binding a wildcard)',
  },
  handshakePort: {
    type: 'integer',
    default: 0,
    min: 0,
    max: 65535,
    env: 'TE_MOONCAKE_WIRE_HANDSHAKE_PORT',
    description: 'Port of the Mooncake P2P handshake listener (0: an ephemeral port); it is the port in the segment name',
  },
  dataPort: {
    type: 'integer',
    default: 0,
    min: 0,
    max: 65535,
    env: 'TE_MOONCAKE_WIRE_DATA_PORT',
    description: 'Port of the Mooncake TCP data listener (0: an ephemeral port), published as tcp_data_port',
  },
  framing: {
    type: 'enum',
    values: ['auto', 'legacy'],
    default: 'auto',
    env: 'TE_MOONCAKE_WIRE_FRAMING',
    description:
      "As initiator: 'auto' uses the acknowledged framing (v2) when the target's descriptor has tcp_proto_version >= 2; 'legacy' always sends v1 requests (no acknowledgements, like MC_TCP_PROTO=1)",
  },
  metadataServer: {
    type: 'string',
    default: 'P2PHANDSHAKE',
    env: 'TE_MOONCAKE_WIRE_METADATA',
    description:
      "Where Mooncake descriptors live: P2PHANDSHAKE (fetched from each peer's handshake port), or etcd://host:2379[,host:2379] shared with Mooncake processes (its key layout: mooncake/ram/<name>, mooncake/rpc_meta/<name>)",
  },
  segmentName: {
    type: 'string',
    env: 'TE_MOONCAKE_WIRE_SEGMENT_NAME',
    description:
      "With etcd: the name this process publishes under (Mooncake's local_server_name; default host:handshake-port). With P2PHANDSHAKE the name is always host:handshake-port",
  },
  clusterId: {
    type: 'string',
    env: 'TE_MOONCAKE_WIRE_CLUSTER_ID',
    description: "With etcd: Mooncake's MC_METADATA_CLUSTER_ID, a key prefix level (mooncake/<id>/ram/<name>)",
  },
  lookup: {
    type: 'boolean',
    env: 'TE_MOONCAKE_WIRE_LOOKUP',
    description:
      "Let the engine's openSegment('host:port') reach Mooncake segments: the name is first asked for a Mooncake descriptor over its handshake protocol (a te peer answers that at once by closing; one extra connection per descriptor fetch). Default: on, but off when the deployment has a secret (whoever answers at a te peer's address could otherwise receive its traffic unauthenticated). false: Mooncake segments only through the transport's own openSegment",
  },
  connectionPool: {
    type: 'boolean',
    default: true,
    env: 'TE_MOONCAKE_WIRE_POOL',
    description:
      "As initiator: keep lanesPerPeer connections per target (like MC_TCP_ENABLE_CONNECTION_POOL=1); false opens one connection per request (Mooncake's default)",
  },
  lanesPerPeer: {
    type: 'integer',
    default: 4,
    min: 1,
    max: 64,
    env: 'TE_MOONCAKE_WIRE_LANES_PER_PEER',
    description: 'As initiator: requests running at once per target, each lane one request at a time (Mooncake targets take no pipelining)',
  },
  connectTimeoutMs: {
    type: 'integer',
    min: 1,
    max: 600000,
    env: 'TE_MOONCAKE_WIRE_CONNECT_TIMEOUT_MS',
    description: "Deadline for one data connection's connect (default: the engine's timeouts.connectMs)",
  },
  handshakeTimeoutMs: {
    type: 'integer',
    default: 5000,
    min: 1,
    max: 600000,
    env: 'TE_MOONCAKE_WIRE_HANDSHAKE_TIMEOUT_MS',
    description: 'Deadline of one handshake exchange, both as client and as server (Mooncake uses 5 s)',
  },
  ioTimeoutMs: {
    type: 'integer',
    default: 30000,
    min: 10,
    max: 3600000,
    env: 'TE_MOONCAKE_WIRE_IO_TIMEOUT_MS',
    description:
      'A request that makes no progress (bytes or status) for this long loses its connection, on both sides (Mooncake waits 30 s for a status frame)',
  },
  idleTimeoutMs: {
    type: 'integer',
    default: 300000,
    min: 100,
    max: 86400000,
    env: 'TE_MOONCAKE_WIRE_IDLE_TIMEOUT_MS',
    description: 'As target: a data connection with no request for this long is closed (Mooncake has no idle timeout; its pooled initiators reconnect)',
  },
  maxConnections: {
    type: 'integer',
    default: 1024,
    min: 1,
    max: 65536,
    env: 'TE_MOONCAKE_WIRE_MAX_CONNECTIONS',
    description: 'As target: data connections served at once (each has a thread); further ones wait for a place (maxWaitingConnections)',
  },
  maxHandshakeConnections: {
    type: 'integer',
    default: 64,
    min: 1,
    max: 65536,
    env: 'TE_MOONCAKE_WIRE_MAX_HANDSHAKE_CONNECTIONS',
    description: 'As target: handshake connections held at once (each may buffer one frame of up to 1 MiB); further ones are closed at accept',
  },
  maxConnectionsPerAddress: {
    type: 'integer',
    default: 256,
    min: 1,
    max: 65536,
    env: 'TE_MOONCAKE_WIRE_MAX_CONNECTIONS_PER_ADDRESS',
    description: 'As target: data connections served at once from one IP address; further ones wait for a place (maxWaitingConnections)',
  },
  maxWaitingConnections: {
    type: 'integer',
    default: 4096,
    min: 0,
    max: 1048576,
    env: 'TE_MOONCAKE_WIRE_MAX_WAITING_CONNECTIONS',
    description:
      'As target: data connections accepted over maxConnections or maxConnectionsPerAddress, waiting (no thread, nothing read) to be served oldest first; further ones are closed at accept',
  },
  maxQueued: {
    type: 'integer',
    default: 65536,
    min: 1,
    max: 16777216,
    env: 'TE_MOONCAKE_WIRE_MAX_QUEUED',
    description: 'As initiator: requests queued or running, all targets together; a batch beyond it fails with POOL_EXHAUSTED',
  },
} as const satisfies OptionsSchema;

export type WireOptions = OptionsOf<typeof wireOptions>;
