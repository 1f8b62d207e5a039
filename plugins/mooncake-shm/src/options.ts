import type { OptionsOf, OptionsSchema } from '@te/connector';

/**
 * Runtime parameters of mooncake-shm, with defaults and the environment variable that sets
 * each one (explicit config > environment > default).
 */
export const shmOptions = {
  enabled: {
    type: 'boolean',
    default: true,
    env: 'TE_SHM',
    description:
      'Whether to move bytes to peers on this host through this transport (TE_SHM=0: never; peers then use the next shared transport, e.g. mooncake-tcp). MC_FORCE_TCP also turns it off',
  },
  copyThreads: {
    type: 'integer',
    default: 2,
    min: 1,
    max: 64,
    env: 'TE_SHM_COPY_THREADS',
    description: 'Threads of the target that run the copies (process_vm_readv/writev); a request larger than chunkBytes is spread over them',
  },
  chunkBytes: {
    type: 'integer',
    default: 262144,
    min: 4096,
    max: 1073741824,
    env: 'TE_SHM_CHUNK_BYTES',
    description: 'A request is copied in chunks of this many bytes; a cancel or revocation takes effect between chunks',
  },
  hugePages: {
    type: 'boolean',
    default: true,
    env: 'TE_SHM_HUGE_PAGES',
    description:
      'Ask the kernel to back registered host memory with transparent huge pages (MADV_HUGEPAGE + MADV_COLLAPSE on the whole 2 MiB pages inside it): process_vm_* pins pages one by one, and huge pages make the copies about 1.6x faster. Best effort',
  },
  batchScheduling: {
    type: 'boolean',
    default: true,
    env: 'TE_SHM_BATCH_SCHEDULING',
    description:
      "Run the copy threads, the target's server thread and the initiator's client thread under SCHED_BATCH: a thread woken by a request or an answer does not take the CPU from the JS thread at once, which saves a pair of context switches per batch when no CPU is idle (docs/plugins/mooncake-shm.md). Unprivileged; a refusal is logged and the threads keep the default policy. Off: the system's default policy",
  },
  maxOutstanding: {
    type: 'integer',
    default: 4096,
    min: 1,
    max: 1048576,
    env: 'TE_SHM_MAX_OUTSTANDING',
    description: 'Requests one initiator may have in flight at this target (the initiator keeps the rest queued); more are refused with POOL_EXHAUSTED',
  },
  maxConnections: {
    type: 'integer',
    default: 1024,
    min: 1,
    max: 65536,
    env: 'TE_SHM_MAX_CONNECTIONS',
    description: 'Accepted connections held at once; further ones are refused with POOL_EXHAUSTED',
  },
  handshakeTimeoutMs: {
    type: 'integer',
    default: 5000,
    min: 50,
    max: 600000,
    env: 'TE_SHM_HANDSHAKE_TIMEOUT_MS',
    description: 'An accepted connection that has not sent HELLO within this is closed',
  },
  connectTimeoutMs: {
    type: 'integer',
    min: 1,
    max: 600000,
    env: 'TE_SHM_CONNECT_TIMEOUT_MS',
    description: "Deadline for connecting and the handshake with a target (then PEER_UNREACHABLE); defaults to the engine's timeouts.connectMs",
  },
  cancelGraceMs: {
    type: 'integer',
    default: 250,
    min: 1,
    max: 60000,
    env: 'TE_SHM_CANCEL_GRACE_MS',
    description:
      'After a timeout/abort, how long the target may take to answer for the batch before the initiator revokes the whole connection (its control-page fence)',
  },
  notifyQueuePerPeer: {
    type: 'integer',
    default: 1024,
    min: 1,
    max: 1048576,
    env: 'TE_SHM_NOTIFY_QUEUE_PER_PEER',
    description: "Notifications received from one peer and not yet handed to listeners; beyond it the sender's batch fails with POOL_EXHAUSTED",
  },
  notifyQueueBytes: {
    type: 'integer',
    default: 67108864,
    min: 65536,
    max: 17179869184,
    env: 'TE_SHM_NOTIFY_QUEUE_BYTES',
    description: 'Bytes of received notifications not yet handed to listeners, all peers together; beyond it senders get POOL_EXHAUSTED',
  },
} as const satisfies OptionsSchema;

export type ShmOptions = OptionsOf<typeof shmOptions>;
