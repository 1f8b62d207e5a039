// Errors
export { TransferError, isTransferError, type TransferErrorOptions } from './errors/transfer-error.js';
export { untilSettled, type Settlement } from './errors/settlement.js';
export { MAX_TIMER_MS } from './timing/deadlines.js';
export { checkMilliseconds } from './timing/milliseconds.js';
export {
  NATIVE_STATUS,
  JS_ONLY_CODES,
  codeForStatus,
  statusForCode,
  isTransferErrorCode,
  type TransferErrorCode,
  type NativeStatusCode,
} from './errors/codes.js';

// Transport SPI
export { PLUGIN_API_VERSION, PLUGIN_NAME_PATTERN, definePlugin, validatePlugin, type TransportPlugin, type ProbeResult } from './spi/plugin.js';
export type { Transport, TransportContext, TransportPeer } from './spi/transport.js';
export { describeCapabilities, type TransportCapabilities } from './spi/capabilities.js';
export { parseOptions, parseEnvBoolean, type OptionSpec, type OptionsSchema, type OptionsOf } from './spi/options.js';
export {
  memoryKindOf,
  isDeviceName,
  type AllocatedMemory,
  type MemoryKind,
  type DeviceName,
  type BufferSource,
  type RegisterRequest,
  type TransportRegistration,
  type WireValue,
} from './spi/memory.js';
export {
  DESCRIPTOR_VERSION,
  TRANSPORT_CLASSES,
  TRANSPORT_CLASS_PATTERN,
  localityOf,
  type SegmentDescriptor,
  type BufferDescriptor,
  type TransportAdvert,
  type TransportClass,
  type KnownTransportClass,
} from './spi/descriptor.js';
export {
  OP_READ,
  OP_WRITE,
  batchOf,
  allocateBatch,
  selectRequests,
  gathersRows,
  localSpan,
  scattersRows,
  remoteSpan,
  batchSize,
  batchBytes,
  type TransferBatch,
  type TransferRequest,
  type TransferOp,
  type SubmitOptions,
  type BatchResult,
  type Notification,
} from './spi/batch.js';

// Registry
export { PluginRegistry, defaultRegistry, registerPlugin, type PluginSource, type PluginRegistryOptions } from './registry/registry.js';
export { BUILTIN_PLUGINS, SWITCH_PROVIDERS } from './registry/builtins.js';

// Config
export { loadConfig, parseConfigJson, readConfigFile, fromFrameworkConfig, transportsOf, type LoadConfigOptions } from './config/load.js';
export { validateConfig, validateBindAddress } from './config/validate.js';
export { ConfigInputSchema } from './config/schema.js';
export { OptionSpecSchema } from './spi/option-spec-schema.js';
export { configFromEnv, ENVIRONMENT_VARIABLES } from './config/env.js';
export { closestName } from './config/closest-name.js';
export {
  DEFAULT_CONFIG,
  type TeConfig,
  type TeConfigInput,
  type ConnectorRole,
  type LogLevel,
  type MetadataConfig,
  type TimeoutConfig,
} from './config/types.js';

// Engine
export {
  TransferEngine,
  createTransferEngine,
  type AllocatedHandle,
  type MemoryHandle,
  type MemoryTarget,
  type RegisterOptions,
  type TransferOptions,
  type CreateEngineOptions,
} from './engine/transfer-engine.js';
export { initTransferEngine, getTransferEngine, closeTransferEngine, hasTransferEngine } from './engine/shared.js';
export { ControlServer, type ControlHandler } from './engine/control-plane.js';
export { CONTROL_VERSION } from './engine/messages.js';
export { ControlClient, type ControlRequestOptions } from './engine/control-client.js';
export { checkSegmentName } from './engine/segment-name.js';
export { preflight, type PreflightCheck, type PreflightOptions } from './engine/preflight.js';
export { P2PHandshake, type MetadataStore } from './engine/metadata.js';
export type { MetadataRecords } from './metadata/records.js';
export { parseMetadataString } from './metadata/connection-string.js';
export { encodeMessage, decodeMessage } from './engine/codec.js';
export type { EngineMetrics, BatchRecord } from './engine/metrics.js';
export { createMetricsRegistry, type PromRegistry } from './metrics/prometheus.js';
export { startMetricLog } from './metrics/periodic-log.js';

// KV connector contract
export { KVStatus, StatusCell, combineStatus, kvStatusName } from './kv/status.js';
export type { ParallelLayout, BootstrapInfo, BufferGroup, KVBuffers } from './kv/layout.js';
export type { KVManager, KVManagerOptions, KVSender, KVReceiver, KVRequest, KVTimeouts, KVBootstrapServer } from './kv/connector.js';

// EC connector contract
export type { ECProducer, ECConsumer, ECConnectorOptions, ECItemParams, ECTransferParams, ECLoadResult } from './ec/connector.js';

// Helpers for native transport plugins
export { loadNativeAddon, type LoadAddonOptions } from './plugin-kit/load-addon.js';
export { BatchTracker } from './plugin-kit/batch-tracker.js';
export { checkSubmit } from './plugin-kit/check-submit.js';
export { TRANSFER_LISTS_KEEP_REGISTERED_BUFFERS, keepAttached } from './spi/keep-attached.js';
export {
  NativeTransportBase,
  type NativeAddonModule,
  type NativeCallbacks,
  type NativeTransportHandle,
  type NativePeer,
} from './plugin-kit/native-transport-base.js';
export { HostAddressSpace } from './plugin-kit/host-address-space.js';
export { advertisedHost } from './plugin-kit/advertised-host.js';
export { usableCpus, cgroupCpuQuota, type ReadText } from './plugin-kit/usable-cpus.js';
export { threadPolicyOf, policyOfStat } from './plugin-kit/thread-policy.js';
