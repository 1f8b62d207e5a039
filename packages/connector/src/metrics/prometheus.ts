import { TransferError } from '../errors/transfer-error.js';
import type { TransferEngine } from '../engine/transfer-engine.js';

// prom-client's surface used here (it is an optional peer dependency, loaded on demand).
interface PromModule {
  Registry: new () => PromRegistry;
  Counter: new (c: { name: string; help: string; labelNames: string[]; registers: PromRegistry[] }) => {
    inc(labels: Record<string, string>, v?: number): void;
  };
  Gauge: new (c: {
    name: string;
    help: string;
    labelNames: string[];
    registers: PromRegistry[];
    collect(this: { set(l: Record<string, string>, v: number): void; reset(): void }): void;
  }) => unknown;
  Histogram: new (c: { name: string; help: string; labelNames: string[]; buckets: number[]; registers: PromRegistry[] }) => {
    observe(labels: Record<string, string>, v: number): void;
  };
}
export interface PromRegistry {
  metrics(): Promise<string>;
}

/**
 * te's transfer metrics in a prom-client registry: bytes, operations and batches per
 * transport and peer, errors by code, batches in flight, and batch latency. Pass the
 * framework's own registry to add te's metrics to its `/metrics`, or merge the returned one
 * (`Registry.merge`). prom-client is an optional peer dependency: install it to use this.
 */
export async function createMetricsRegistry(engine: TransferEngine, options: { registry?: PromRegistry; prefix?: string } = {}): Promise<PromRegistry> {
  if (typeof engine?.observeBatches !== 'function')
    throw new TransferError('INVALID_ARGUMENT', 'createMetricsRegistry needs the TransferEngine whose batches it counts');
  let prom: PromModule;
  try {
    prom = (await import('prom-client')) as unknown as PromModule;
  } catch (cause) {
    throw new TransferError('INVALID_CONFIG', 'Prometheus metrics need the prom-client package: npm install prom-client', { cause });
  }
  const p = options.prefix ?? 'te_';
  const registry = options.registry ?? new prom.Registry();
  const registers = [registry];
  const bytes = new prom.Counter({
    name: `${p}transfer_bytes_total`,
    help: 'Bytes moved by batches that succeeded',
    labelNames: ['transport', 'peer'],
    registers,
  });
  const ops = new prom.Counter({
    name: `${p}transfer_operations_total`,
    help: 'Requests (descriptors) submitted',
    labelNames: ['transport', 'peer'],
    registers,
  });
  const batches = new prom.Counter({
    name: `${p}transfer_batches_total`,
    help: 'Batches settled, by result',
    labelNames: ['transport', 'peer', 'result'],
    registers,
  });
  const errors = new prom.Counter({
    name: `${p}transfer_errors_total`,
    help: 'Failed batches by TransferError code',
    labelNames: ['transport', 'code'],
    registers,
  });
  const latency = new prom.Histogram({
    name: `${p}transfer_batch_seconds`,
    help: 'Batch latency from submission to settlement',
    labelNames: ['transport'],
    buckets: [0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 10],
    registers,
  });
  new prom.Gauge({
    name: `${p}transfer_in_flight`,
    help: 'Batches in flight',
    labelNames: ['transport'],
    registers,
    collect() {
      this.reset();
      for (const [t, n] of Object.entries(engine.inFlight())) this.set({ transport: t }, n);
    },
  });
  engine.observeBatches((r) => {
    const transports = r.transports.length ? r.transports : ['none'];
    for (const transport of transports) {
      const share = 1 / transports.length;
      const labels = { transport, peer: r.segment };
      ops.inc(labels, r.requests * share);
      if (r.code === undefined) bytes.inc(labels, Number(r.bytes) * share);
      else errors.inc({ transport, code: r.code });
      batches.inc({ ...labels, result: r.code === undefined ? 'ok' : 'error' });
      latency.observe({ transport }, r.seconds);
    }
  });
  return registry;
}
