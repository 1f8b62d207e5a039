import { Type, type TSchema } from '@sinclair/typebox';
import { BUILTIN_PLUGINS } from '../registry/builtins.js';
import { MAX_TIMER_MS } from '../timing/deadlines.js';

/** The built-in named as the example of a connector name. */
const EXAMPLE_CONNECTOR = Object.keys(BUILTIN_PLUGINS)[0]!;

/*
 * The config's shape, one definition: validateConfig checks inputs against it, and
 * docs/config.schema.json is generated from it (scripts/config-schema.mjs; a test fails when
 * the file is stale). `expected` is the phrase error messages use ("Expected `x` to …").
 */
const expect = <T extends TSchema>(schema: T, expected: string): T => Object.assign(schema, { expected });

const MAX_MS = MAX_TIMER_MS;
/** A day: the longest interval between metric lines (a timer's own limit is under 25 days). */
export const MAX_METRIC_INTERVAL_S = 86_400;

export const TimeoutsSchema = Type.Object(
  {
    transferMs: expect(
      Type.Integer({ minimum: 1, maximum: MAX_MS, description: 'Default deadline of a batch when the caller gives none (ms)' }),
      `be a positive integer no larger than ${MAX_MS}`,
    ),
    handshakeMs: expect(
      Type.Integer({ minimum: 1, maximum: MAX_MS, description: "Fetching a peer's descriptor (ms)" }),
      `be a positive integer no larger than ${MAX_MS}`,
    ),
    connectMs: expect(
      Type.Integer({ minimum: 1, maximum: MAX_MS, description: 'Connecting a transport to a peer (ms)' }),
      `be a positive integer no larger than ${MAX_MS}`,
    ),
    registerMs: expect(
      Type.Integer({ minimum: 1, maximum: MAX_MS, description: "A transport's registering, unregistering, allocating or freeing memory (ms)" }),
      `be a positive integer no larger than ${MAX_MS}`,
    ),
  },
  { additionalProperties: false },
);

/** The object form of `metadata` (the other form is a connection string). */
export const MetadataObjectSchema = Type.Partial(
  Type.Object(
    {
      type: expect(
        Type.Union([Type.Literal('p2p'), Type.Literal('etcd')], {
          description: 'p2p: descriptors fetched from peers themselves; etcd: kept in etcd under a lease',
        }),
        'be "p2p" or "etcd"',
      ),
      port: expect(
        Type.Integer({ minimum: 0, maximum: 65535, description: 'Control endpoint port; 0 picks a free one' }),
        'be a non-negative integer no larger than 65535',
      ),
      endpoints: expect(
        Type.Array(Type.String({ minLength: 1 }), { description: 'etcd members, host:port (with type etcd)' }),
        'be a list of host:port strings',
      ),
      prefix: expect(
        Type.String({
          minLength: 1,
          maxLength: 128,
          pattern: '^[A-Za-z0-9._/-]+$',
          description: 'Key prefix (cluster id) separating deployments that share one etcd',
        }),
        'be 1 to 128 characters of letters, digits, . _ / -',
      ),
      leaseTtlS: expect(
        Type.Integer({ minimum: 2, maximum: 3600, description: "Lease TTL (s): a dead process's descriptor disappears this long after it died" }),
        'be an integer from 2 to 3600',
      ),
    },
    { additionalProperties: false },
  ),
);

export const ConfigInputSchema = Type.Object(
  {
    connector: expect(
      Type.String({ minLength: 1, pattern: '\\S', description: `Transport plugin name (${EXAMPLE_CONNECTOR}, …), or any name with modulePath` }),
      `name a transport plugin (e.g. "${EXAMPLE_CONNECTOR}")`,
    ),
    role: Type.Optional(
      expect(
        Type.Union([Type.Literal('producer'), Type.Literal('consumer'), Type.Literal('both')], { description: "vLLM's kv_role without the kv_ prefix" }),
        'be one of producer, consumer, both',
      ),
    ),
    modulePath: Type.Optional(
      expect(
        Type.String({ minLength: 1, description: 'Package name or file path of a third-party plugin; wins over the built-in table' }),
        'be a package name or file path',
      ),
    ),
    transports: Type.Optional(
      expect(Type.Array(Type.String({ minLength: 1 }), { description: 'Further transports besides connector' }), 'be a list of plugin names'),
    ),
    transportOptions: Type.Optional(
      expect(
        Type.Record(Type.String(), Type.Record(Type.String(), Type.Unknown()), {
          description: "Options per plugin name, checked by each plugin's options schema",
        }),
        'map plugin names to option objects',
      ),
    ),
    metadata: Type.Optional(
      expect(
        Type.Union([
          Type.String({ minLength: 1, description: 'Connection string: "p2p" or "etcd://host:2379[,host2:2379]" (Mooncake\'s metadata_server spelling)' }),
          MetadataObjectSchema,
        ]),
        'be "p2p", "etcd://host:port[,host:port]" or an object',
      ),
    ),
    bindAddress: Type.Optional(
      expect(
        Type.String({ description: 'Address to bind and advertise (MC_TCP_BIND_ADDRESS): an IP literal or a host name, not a wildcard' }),
        'be an IPv4/IPv6 address or a host name',
      ),
    ),
    timeouts: Type.Optional(expect(Type.Partial(TimeoutsSchema), 'be an object')),
    forceTcp: Type.Optional(expect(Type.Boolean({ description: 'MC_FORCE_TCP' }), 'be a boolean')),
    intranodeNvlink: Type.Optional(expect(Type.Boolean({ description: 'MC_INTRANODE_NVLINK' }), 'be a boolean')),
    forceMnnvl: Type.Optional(expect(Type.Boolean({ description: 'MC_FORCE_MNNVL' }), 'be a boolean')),
    metrics: Type.Optional(expect(Type.Boolean({ description: 'MC_TE_METRIC' }), 'be a boolean')),
    metricIntervalS: Type.Optional(
      expect(
        Type.Integer({ minimum: 1, maximum: MAX_METRIC_INTERVAL_S, description: 'Seconds between the lines `metrics` logs (TE_METRIC_INTERVAL_S)' }),
        `be an integer of seconds from 1 to ${MAX_METRIC_INTERVAL_S}`,
      ),
    ),
    logLevel: Type.Optional(
      expect(
        Type.Union(
          ['trace', 'debug', 'info', 'warn', 'error', 'silent'].map((l) => Type.Literal(l)),
          { description: 'MC_LOG_LEVEL' },
        ),
        'be one of trace, debug, info, warn, error, silent',
      ),
    ),
    extra: Type.Optional(
      expect(Type.Record(Type.String(), Type.Unknown(), { description: "Connector-specific settings (vLLM's kv_connector_extra_config)" }), 'be an object'),
    ),
    secret: Type.Optional(
      expect(
        Type.String({
          minLength: 16,
          maxLength: 1024,
          description: 'TE_SECRET: shared secret; authenticates (and, on the control plane, encrypts) every connection between processes',
        }),
        'be a string of 16 to 1024 characters',
      ),
    ),
  },
  { additionalProperties: false, $id: 'https://te.invalid/config.schema.json', title: 'te connector config' },
);
