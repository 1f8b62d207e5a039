import { TransferError, isTransferError, type ECConsumer, type ECLoadResult, type ECTransferParams, type TransferEngine } from '@te/connector';
import { checkReply } from '../protocol/handle.js';
import { engineFor } from '../shared/engine.js';
import { EC_PROTOCOL_VERSION, EC_PULL, MAX_ITEMS_PER_PULL, PullReplySchema, type PullMessage } from './messages.js';

export interface ECConsumerOptions {
  connector?: string;
  modulePath?: string;
  config?: Record<string, unknown>;
  engine?: TransferEngine;
  /** How long a load may take before its items count as failed (default 30 s). */
  loadTimeoutMs?: number;
}

interface Pending {
  hashes: string[];
  done: Promise<void>;
}

/**
 * The prefill side of EPD: asks producers for the items a request needs, to be written
 * into its own registered memory; `waitForLoad` reports which arrived and which failed
 * (to be encoded locally), and never hangs past its timeout.
 */
export class ECPullConsumer implements ECConsumer {
  private pending: Pending[] = [];
  private loaded: string[] = [];
  private failed: { mmHash: string; error: Error }[] = [];

  private constructor(readonly engine: TransferEngine, readonly loadTimeoutMs: number) {}

  static async create(options: ECConsumerOptions = {}): Promise<ECPullConsumer> {
    const engine = await engineFor(options);
    return new ECPullConsumer(engine, options.loadTimeoutMs ?? 30_000);
  }

  startLoad(params: ECTransferParams, destination: (mmHash: string, length: bigint) => { addr: bigint }): void {
    const byProducer = new Map<string, { hash: string; addr: bigint; length: bigint }[]>();
    for (const [hash, p] of Object.entries(params ?? {})) {
      try {
        if (!p || p.do_remote_encode !== true) continue;
        if (typeof p.remote_host !== 'string' || !Number.isInteger(p.remote_port) || typeof p.length !== 'string' || !/^\d+$/.test(p.length)) {
          throw new TransferError('INVALID_ARGUMENT', `ec_transfer_params for ${hash} lack remote_host, remote_port or a decimal length`);
        }
        const length = BigInt(p.length);
        const { addr } = destination(hash, length);
        const host = p.remote_host.includes(':') ? `[${p.remote_host}]` : p.remote_host;
        const segment = `${host}:${p.remote_port}`;
        let list = byProducer.get(segment);
        if (!list) byProducer.set(segment, (list = []));
        list.push({ hash, addr, length });
      } catch (e) {
        this.failed.push({ mmHash: hash, error: e as Error });
      }
    }
    for (const [segment, items] of byProducer) {
      for (let i = 0; i < items.length; i += MAX_ITEMS_PER_PULL) {
        const part = items.slice(i, i + MAX_ITEMS_PER_PULL);
        this.pending.push({ hashes: part.map((x) => x.hash), done: this.pull(segment, part) });
      }
    }
  }

  private async pull(segment: string, items: { hash: string; addr: bigint; length: bigint }[]): Promise<void> {
    const body: PullMessage = {
      v: EC_PROTOCOL_VERSION,
      consumerSegment: this.engine.segmentName,
      hashes: items.map((x) => x.hash),
      addrs: BigUint64Array.from(items.map((x) => x.addr)),
      lengths: BigUint64Array.from(items.map((x) => x.length)),
      timeoutMs: this.loadTimeoutMs,
    };
    try {
      // The producer answers after its write batch settled, within its own deadline; the
      // control request allows a little more so its answer, not our timer, decides.
      const reply = checkReply(EC_PULL, PullReplySchema, await this.engine.controlClient(segment).request(EC_PULL, body, this.loadTimeoutMs + 2_000));
      items.forEach((x, i) => {
        const r = reply.results[i];
        if (r?.ok) this.loaded.push(x.hash);
        else this.failed.push({ mmHash: x.hash, error: new TransferError(r?.code && /^[A-Z_]+$/.test(r.code) ? (r.code as 'TRANSFER_FAILED') : 'TRANSFER_FAILED', `item ${x.hash} from ${segment}: ${r?.message ?? 'no result'}`) });
      });
    } catch (e) {
      const code = isTransferError(e) ? e.code : 'TRANSFER_FAILED';
      for (const x of items) this.failed.push({ mmHash: x.hash, error: new TransferError(code, `item ${x.hash} from ${segment}: ${(e as Error).message}`, { cause: e }) });
    }
  }

  async waitForLoad(options: { timeoutMs?: number; signal?: AbortSignal } = {}): Promise<ECLoadResult> {
    const pending = this.pending;
    this.pending = [];
    const timeoutMs = options.timeoutMs ?? this.loadTimeoutMs + 5_000;
    let timer: NodeJS.Timeout | undefined;
    const outcome = await Promise.race([
      Promise.all(pending.map((p) => p.done)).then(() => 'done' as const),
      new Promise<'timeout'>((r) => (timer = setTimeout(() => r('timeout'), timeoutMs))),
      ...(options.signal ? [new Promise<'aborted'>((r) => (options.signal!.aborted ? r('aborted') : options.signal!.addEventListener('abort', () => r('aborted'), { once: true })))] : []),
    ]);
    clearTimeout(timer);
    if (outcome !== 'done') {
      // Items still in flight count as failed; their producer may still write their destination
      // until its own deadline passes, so that memory must not be reused before then.
      const settled = new Set([...this.loaded, ...this.failed.map((f) => f.mmHash)]);
      for (const p of pending) for (const h of p.hashes) if (!settled.has(h)) this.failed.push({ mmHash: h, error: new TransferError(outcome === 'timeout' ? 'TIMEOUT' : 'ABORTED', `item ${h}: not loaded within ${timeoutMs} ms`) });
    }
    const result = { loaded: this.loaded, failed: this.failed };
    this.loaded = [];
    this.failed = [];
    return result;
  }

  async close(): Promise<void> {
    await Promise.allSettled(this.pending.map((p) => p.done));
  }
}

export function createECConsumer(options: ECConsumerOptions = {}): Promise<ECPullConsumer> {
  return ECPullConsumer.create(options);
}
