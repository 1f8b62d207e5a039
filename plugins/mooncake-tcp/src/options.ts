import type { OptionsOf, OptionsSchema } from '@te/connector';
import { defaultIoThreads } from './thread-defaults.js';

/**
 * Runtime parameters of mooncake-tcp, with defaults and the environment variable that
 * sets each one (explicit config > environment > default).
 */
export const tcpOptions = {
  port: {
    type: 'integer',
    default: 0,
    min: 0,
    max: 65535,
    env: 'TE_TCP_PORT',
    description: 'TCP port of the data listener (0 = an ephemeral port, published in the endpoint)',
  },
  advertiseHost: {
    type: 'string',
    env: 'TE_TCP_ADVERTISE_HOST',
    description: 'Host peers connect to (default: the bind address, or the first non-internal IPv4 address when binding a wildcard)',
  },
  ioThreads: {
    type: 'integer',
    default: defaultIoThreads(),
    min: 1,
    max: 64,
    env: 'TE_TCP_IO_THREADS',
    description: 'epoll I/O threads; connections (both directions) are spread over them. Default: 2, or one per 4 CPUs up to 4',
  },
  lanesPerPeer: {
    type: 'integer',
    default: defaultIoThreads(),
    min: 1,
    max: 64,
    env: 'TE_TCP_LANES_PER_PEER',
    description: "Persistent TCP connections per peer; slices of a batch are spread over them and pipelined. Default: as ioThreads' default",
  },
  connectTimeoutMs: {
    type: 'integer',
    min: 1,
    max: 600000,
    env: 'TE_TCP_CONNECT_TIMEOUT_MS',
    description: "Deadline for connect + handshake of one lane (then PEER_UNREACHABLE); defaults to the engine's timeouts.connectMs (TE_CONNECT_TIMEOUT_MS)",
  },
  sliceSize: {
    type: 'integer',
    default: 1048576,
    min: 4096,
    max: 1073741824,
    env: 'TE_TCP_SLICE_SIZE',
    description: 'Requests larger than this are cut into slices of this many bytes, spread over lanes',
  },
  socketBufferBytes: {
    type: 'integer',
    default: 0,
    min: 0,
    max: 1073741824,
    env: 'TE_TCP_SOCKET_BUFFER_BYTES',
    description: 'SO_SNDBUF/SO_RCVBUF of data sockets; 0 keeps kernel autotuning (the fastest setting measured on loopback)',
  },
  congestionControl: {
    type: 'string',
    env: 'TE_TCP_CONGESTION',
    // The kernel's names: up to 15 characters (TCP_CA_NAME_MAX 16 with its terminator).
    pattern: /^[A-Za-z0-9_-]{1,15}$/,
    description:
      "TCP congestion control of the data sockets (TCP_CONGESTION), e.g. 'cubic'; default: the system's (net.ipv4.tcp_congestion_control). With bbr every socket is paced by a timer, which costs throughput on loopback and short links (docs/plugins/mooncake-tcp.md). A name the kernel refuses fails the engine's start with INVALID_ARGUMENT",
  },
  windowBytes: {
    type: 'integer',
    default: 33554432,
    min: 65536,
    max: 1073741824,
    env: 'TE_TCP_WINDOW_BYTES',
    description: 'Bytes in flight (sent, not yet acknowledged) per lane',
  },
  cancelGraceMs: {
    type: 'integer',
    default: 250,
    min: 1,
    max: 60000,
    env: 'TE_TCP_CANCEL_GRACE_MS',
    description:
      "After a timeout/abort, how long in-flight slices may take to be acknowledged before their lane's connection is reset, then how long the target has to confirm the reset",
  },
  notifyQueuePerPeer: {
    type: 'integer',
    default: 1024,
    min: 1,
    max: 1048576,
    env: 'TE_TCP_NOTIFY_QUEUE_PER_PEER',
    description: "Notifications received from one peer and not yet handed to listeners; beyond it the sender's batch fails with POOL_EXHAUSTED",
  },
  notifyQueueBytes: {
    type: 'integer',
    default: 67108864,
    min: 65536,
    max: 17179869184,
    env: 'TE_TCP_NOTIFY_QUEUE_BYTES',
    description: 'Bytes of received notifications not yet handed to listeners, all peers together; beyond it senders get POOL_EXHAUSTED',
  },
  maxConnections: {
    type: 'integer',
    default: 4096,
    min: 1,
    max: 1048576,
    env: 'TE_TCP_MAX_CONNECTIONS',
    description: 'Accepted data connections held at once; further ones are closed at accept',
  },
  maxConnectionsPerAddress: {
    type: 'integer',
    default: 1024,
    min: 1,
    max: 1048576,
    env: 'TE_TCP_MAX_CONNECTIONS_PER_ADDRESS',
    description: 'Accepted data connections held at once from one IP address; further ones are closed at accept',
  },
  handshakeTimeoutMs: {
    type: 'integer',
    default: 5000,
    min: 1,
    max: 600000,
    env: 'TE_TCP_HANDSHAKE_TIMEOUT_MS',
    description: 'An accepted connection that has not completed HELLO (and AUTH) within this is closed',
  },
  idleTimeoutMs: {
    type: 'integer',
    default: 300000,
    min: 100,
    max: 86400000,
    env: 'TE_TCP_IDLE_TIMEOUT_MS',
    description:
      'A connection with nothing in flight for this long is closed (initiators close theirs at half of it, so a target never closes a lane under a request)',
  },
  busyPollUs: {
    type: 'integer',
    default: 0,
    min: 0,
    max: 10000,
    env: 'TE_TCP_BUSY_POLL_US',
    description:
      'After handling events, an I/O thread polls without sleeping for this many microseconds before it waits in epoll again (saves two context switches per round trip when replies follow quickly; costs CPU while idle-ish). 0: never spins',
  },
  batchScheduling: {
    type: 'boolean',
    default: false,
    env: 'TE_TCP_BATCH_SCHEDULING',
    description:
      'Run the I/O threads under SCHED_BATCH: a thread the JS thread wakes does not take the CPU from it at once. With no CPU to spare that moves 64 KiB and larger requests 5-10% faster, but slows 4 KiB reads by about a sixth (the I/O threads wait for a saturated JS thread), hence off by default (docs/plugins/mooncake-tcp.md). Unprivileged; a refusal is logged and the threads keep the default policy',
  },
  coalesceWrites: {
    type: 'boolean',
    default: true,
    env: 'TE_TCP_COALESCE_WRITES',
    description:
      'Send runs of small writes of one batch to one peer as one WRITEV frame (up to 64 writes, 1 MiB): one header, one answer and one receive at the target for the run. Each write is still checked and answered on its own. Off: one frame per write',
  },
  authSecret: {
    type: 'string',
    env: 'TE_TCP_AUTH_SECRET',
    description: 'Shared secret: peers must prove it (HMAC-SHA256 challenge/response) at connect, else AUTH_FAILED',
  },
} as const satisfies OptionsSchema;

export type TcpOptions = OptionsOf<typeof tcpOptions>;
