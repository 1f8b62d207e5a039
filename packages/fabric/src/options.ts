import type { OptionsOf, OptionsSchema } from '@te/connector';

/**
 * Runtime parameters shared by the libfabric plugins, with defaults and the environment
 * variable that sets each (explicit config > environment > default), under the plugin's
 * `prefix` ("TE_<NAME>"; give nativeOptions the same). libfabric's own variables
 * (FI_PROVIDER, FI_TCP_IFACE, FI_SOCKETS_IFACE, FI_LOG_LEVEL, ...) apply as well.
 */
export function fabricOptionsSchema<P extends string>(prefix: P) {
  return { ...railOptions(prefix), ...slicingOptions(prefix), ...completionOptions(prefix), ...notificationOptions(prefix) };
}

/** Which provider and NICs carry the data, and how many rails (endpoints) each. */
function railOptions<P extends string>(prefix: P) {
  return {
    provider: {
      type: 'string',
      env: `${prefix}_PROVIDER`,
      description:
        'libfabric provider ("verbs", "efa", "tcp;ofi_rxm", "sockets", ...). Default: automatic (verbs/efa/psm3/cxi/opx when a NIC exists, else tcp;ofi_rxm, then sockets; never shm). FI_PROVIDER also narrows what libfabric reports.',
    },
    nics: {
      type: 'list',
      default: [],
      env: `${prefix}_NICS`,
      description:
        'NIC (libfabric domain) names to use, comma separated, like Mooncake\'s device list (e.g. "mlx5_0,mlx5_1"); default: every domain of the provider, up to maxRails',
    },
    maxRails: {
      type: 'integer',
      default: 4,
      min: 1,
      max: 64,
      env: `${prefix}_MAX_RAILS`,
      description: 'Most NICs (libfabric domains) to use; each carries railsPerNic rails, and slices are striped over all rails',
    },
    railsPerNic: {
      type: 'integer',
      // 0 (automatic): on a 16-core host four tcp;ofi_rxm rails moved 2–3× the bytes of one
      // (docs/benchmarks.md); a hardware NIC does its own progress, so there it stays 1.
      default: 0,
      min: 0,
      max: 16,
      env: `${prefix}_RAILS_PER_NIC`,
      description:
        'Endpoints per NIC, each with its own progress thread; slices are striped over all of them. 0: automatic, 1 on hardware providers (verbs, efa, ...), one per 4 CPUs (1 to 4) on socket-based ones (tcp;ofi_rxm, sockets), whose progress is CPU work',
    },
    idleSpinUs: {
      type: 'integer',
      // 20 ms: on tcp;ofi_rxm the target of RMA writes progresses data without a completion of
      // its own; a rail that slept whenever its CQ stayed empty was woken for every arrival,
      // at the sender's cost (writes 1.20–1.37× with the window, reads 1.00–1.12×; docs/benchmarks.md).
      default: 20000,
      min: 0,
      max: 10000000,
      env: `${prefix}_IDLE_SPIN_US`,
      description:
        "Microseconds a rail's progress thread keeps polling after its last sign of work (a completion, or a wait during which the provider moved data) before it sleeps on its completion queue; 0: sleep as soon as it finds nothing to do. A rail of an idle process sleeps",
    },
    sourceAddress: {
      type: 'string',
      env: `${prefix}_SOURCE_ADDRESS`,
      description: 'Source node for socket-based providers (tcp, sockets), passed with FI_SOURCE. Default: the engine bind address when it is not a wildcard',
    },
    allowShm: {
      type: 'boolean',
      default: false,
      env: `${prefix}_ALLOW_SHM`,
      description: 'Permit the shm provider when named explicitly. shm checks neither keys nor bounds: use it only when every peer is trusted',
    },
  } as const satisfies OptionsSchema;
}

/** How requests are cut into slices and how many RMA operations are in flight. */
function slicingOptions<P extends string>(prefix: P) {
  return {
    sliceSize: {
      type: 'integer',
      default: 1048576,
      min: 4096,
      max: 1073741824,
      env: `${prefix}_SLICE_SIZE`,
      description: 'Requests larger than this are cut into slices of this many bytes, striped over rails',
    },
    window: {
      type: 'integer',
      // 256: on tcp;ofi_rxm, 64 left reads waiting on the window (4 KiB reads +10–46%, 64 KiB PD reads +37–43% at 256; docs/benchmarks.md).
      default: 256,
      min: 1,
      max: 4096,
      env: `${prefix}_WINDOW`,
      description: "RMA operations in flight per rail (also bounded by the provider's tx queue size)",
    },
    slicesPerOp: {
      type: 'integer',
      default: 4,
      min: 1,
      max: 4,
      env: `${prefix}_SLICES_PER_OP`,
      description:
        "Consecutive slices of one batch to one peer region carried by one scatter-gather RMA, up to the provider's iov limits (tcp;ofi_rxm: 4, verbs: 1); 1: one operation per slice",
    },
  } as const satisfies OptionsSchema;
}

/** Deadlines and when a write counts as done. */
function completionOptions<P extends string>(prefix: P) {
  return {
    connectTimeoutMs: {
      type: 'integer',
      min: 1,
      max: 600000,
      env: `${prefix}_CONNECT_TIMEOUT_MS`,
      description:
        "Deadline of the hello on every rail at openPeer and of region-table queries (then PEER_UNREACHABLE). Default: the engine's timeouts.connectMs",
    },
    cancelGraceMs: {
      type: 'integer',
      default: 250,
      min: 1,
      max: 60000,
      env: `${prefix}_CANCEL_GRACE_MS`,
      description:
        'Deprecated, no effect: after a timeout or abort a batch settles only when the provider has reported its posted RMA (libfabric cannot recall it); accepted so existing configurations still load',
    },
    deliveryComplete: {
      type: 'boolean',
      default: true,
      env: `${prefix}_DELIVERY_COMPLETE`,
      description:
        'Post writes with FI_DELIVERY_COMPLETE, so a completed write is known applied at the target; a provider that refuses the flag fails the write (it is never downgraded to a write complete once sent)',
    },
    writeFence: {
      type: 'boolean',
      default: true,
      env: `${prefix}_WRITE_FENCE`,
      description:
        "Where the provider places writes to a peer in posted order (FI_ORDER_WAW), ask for delivery completion only on each batch's last write per rail and hold the others until it is delivered (same guarantee, fewer acknowledgements); off: every write asks for it",
    },
  } as const satisfies OptionsSchema;
}

/** Bounds on received notifications not yet handed to listeners. */
function notificationOptions<P extends string>(prefix: P) {
  return {
    notifyQueuePerPeer: {
      type: 'integer',
      default: 1024,
      min: 1,
      max: 1048576,
      env: `${prefix}_NOTIFY_QUEUE_PER_PEER`,
      description:
        "Notifications received from one peer and not yet handed to listeners; beyond it further ones are refused and the sender's batch fails with POOL_EXHAUSTED",
    },
    notifyQueueBytes: {
      type: 'integer',
      default: 67108864,
      min: 65536,
      max: 17179869184,
      env: `${prefix}_NOTIFY_QUEUE_BYTES`,
      description:
        'Bytes of received notifications not yet handed to listeners (payload + 256 each), all peers together; beyond it further ones are refused (POOL_EXHAUSTED at the sender)',
    },
  } as const satisfies OptionsSchema;
}

/** The options every libfabric plugin shares. */
export type FabricOptions = OptionsOf<ReturnType<typeof fabricOptionsSchema<string>>>;
