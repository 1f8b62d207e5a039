import {
  TransferError,
  checkMilliseconds,
  isTransferError,
  isTransferErrorCode,
  type ECConsumer,
  type ECLoadResult,
  type ECTransferParams,
  type TransferEngine,
} from '@te/connector';
import { checkReply } from '../protocol/handle.js';
import { engineFor } from '../shared/engine.js';
import { EC_PROTOCOL_VERSION, EC_PULL, MAX_ITEMS_PER_PULL, MAX_PULL_TIMEOUT_MS, PullReplySchema, type PullMessage } from './messages.js';
import { crc32cOfViews } from './item-checksums.js';
import { expectObject } from '../shared/expect-object.js';

/** Why each item that landed differs from what its producer sent (its CRC32C), or undefined; items without a CRC or not in host memory are not checked. */
async function corruptedItems(
  engine: TransferEngine,
  items: { addr: bigint; length: bigint }[],
  want: (number | undefined)[],
): Promise<(string | undefined)[]> {
  const views = items.map((x, i) => (want[i] === undefined ? undefined : engine.hostView(x.addr, x.length)));
  const checked = views.map((v, i) => (v ? i : -1)).filter((i) => i >= 0);
  const got = await crc32cOfViews(checked.map((i) => views[i]!));
  const out: (string | undefined)[] = items.map(() => undefined);
  checked.forEach((i, j) => {
    if (got[j] !== want[i])
      out[i] = `checksum mismatch (CRC32C ${got[j]!.toString(16)}, the producer sent ${want[i]!.toString(16)}): the bytes that landed are not the item's`;
  });
  return out;
}

export interface ECConsumerOptions {
  connector?: string;
  modulePath?: string;
  config?: Record<string, unknown>;
  engine?: TransferEngine;
  /** How long a load may take before its items count as failed (default 30 s). */
  loadTimeoutMs?: number;
}

/** One pull request to one producer: its items, and the outcome it alone resolves with. */
interface Pending {
  hashes: string[];
  done: Promise<ECLoadResult>;
}

/**
 * The prefill side of EPD: asks producers for the items a request needs, to be written
 * into its own registered memory; `waitForLoad` reports which arrived and which failed
 * (to be encoded locally), and never hangs past its timeout.
 */
export class ECPullConsumer implements ECConsumer {
  private pending: Pending[] = [];
  /** Items refused before any pull was sent (bad params, no destination): reported by the next waitForLoad. */
  private refused: ECLoadResult['failed'] = [];
  /** Every pull not yet answered, including those a timed-out waitForLoad gave up on (close waits for them). */
  private readonly inflight = new Set<Promise<ECLoadResult>>();

  private constructor(
    readonly engine: TransferEngine,
    readonly loadTimeoutMs: number,
  ) {}

  static async create(options: ECConsumerOptions = {}): Promise<ECPullConsumer> {
    // Checked before an engine exists: a refused option leaves nothing open.
    expectObject(options, "createECConsumer's options");
    const loadTimeoutMs = checkMilliseconds('`loadTimeoutMs`', options.loadTimeoutMs ?? 30_000, 1, MAX_PULL_TIMEOUT_MS, 'what a producer accepts in a pull');
    const engine = await engineFor(options);
    return new ECPullConsumer(engine, loadTimeoutMs);
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
        this.refused.push({ mmHash: hash, error: e as Error });
      }
    }
    for (const [segment, items] of byProducer) {
      for (let i = 0; i < items.length; i += MAX_ITEMS_PER_PULL) {
        const part = items.slice(i, i + MAX_ITEMS_PER_PULL);
        const done = this.pull(segment, part);
        this.inflight.add(done);
        void done.finally(() => this.inflight.delete(done));
        this.pending.push({ hashes: part.map((x) => x.hash), done });
      }
    }
  }

  /** One pull; resolves (never rejects) with its own items' outcome, so a late answer cannot leak into a later load. */
  private async pull(segment: string, items: { hash: string; addr: bigint; length: bigint }[]): Promise<ECLoadResult> {
    const out: ECLoadResult = { loaded: [], failed: [] };
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
      const corruption = await corruptedItems(
        this.engine,
        items,
        items.map((_, i) => (reply.results[i]?.ok ? reply.results[i]!.crc32c : undefined)),
      );
      items.forEach((x, i) => {
        const r = reply.results[i];
        const corrupted = corruption[i];
        if (r?.ok && !corrupted) out.loaded.push(x.hash);
        else if (corrupted) out.failed.push({ mmHash: x.hash, error: new TransferError('DATA_CORRUPTED', `item ${x.hash} from ${segment}: ${corrupted}`) });
        else {
          const code = r?.code && isTransferErrorCode(r.code) ? r.code : 'TRANSFER_FAILED';
          // The producer's transport settled its write without knowing it stopped landing.
          const details = r?.destinationMayBeWritten === true ? { details: { destinationMayBeWritten: true } } : {};
          out.failed.push({ mmHash: x.hash, error: new TransferError(code, `item ${x.hash} from ${segment}: ${r?.message ?? 'no result'}`, details) });
        }
      });
    } catch (e) {
      const code = isTransferError(e) ? e.code : 'TRANSFER_FAILED';
      // No answer: the producer may still be writing (its transport holds the batch). A
      // producer that refused or cannot be reached writes nothing.
      const details = code === 'TIMEOUT' ? { destinationMayBeWritten: true } : undefined;
      for (const x of items)
        out.failed.push({
          mmHash: x.hash,
          error: new TransferError(code, `item ${x.hash} from ${segment}: ${(e as Error).message}`, { cause: e, ...(details ? { details } : {}) }),
        });
    }
    return out;
  }

  async waitForLoad(options: { timeoutMs?: number; signal?: AbortSignal } = {}): Promise<ECLoadResult> {
    const timeoutMs = checkMilliseconds('the `timeoutMs` option', options.timeoutMs ?? this.loadTimeoutMs + 5_000, 0);
    const pending = this.pending;
    const result: ECLoadResult = { loaded: [], failed: this.refused };
    this.pending = [];
    this.refused = [];
    const outcomes: (ECLoadResult | undefined)[] = pending.map(() => undefined);
    let timer: NodeJS.Timeout | undefined;
    let onAbort: (() => void) | undefined;
    const signal = options.signal;
    const outcome = await Promise.race([
      Promise.all(pending.map((p, i) => p.done.then((o) => (outcomes[i] = o)))).then(() => 'done' as const),
      new Promise<'timeout'>((r) => (timer = setTimeout(() => r('timeout'), timeoutMs))),
      ...(signal
        ? [new Promise<'aborted'>((r) => (signal.aborted ? r('aborted') : signal.addEventListener('abort', (onAbort = () => r('aborted')), { once: true })))]
        : []),
    ]);
    clearTimeout(timer);
    if (onAbort) signal!.removeEventListener('abort', onAbort); // a long-lived signal keeps no listener per load
    pending.forEach((p, i) => {
      const o = outcomes[i];
      if (o) {
        result.loaded.push(...o.loaded);
        result.failed.push(...o.failed);
        return;
      }
      // Still in flight: failed for this load (its late answer is dropped). Its producer may
      // still write the destination until its own deadline passes, so that memory must not
      // be reused before then.
      const code = outcome === 'aborted' ? 'ABORTED' : 'TIMEOUT';
      for (const h of p.hashes)
        result.failed.push({
          mmHash: h,
          error: new TransferError(code, `item ${h}: not loaded within ${timeoutMs} ms${code === 'ABORTED' ? ' (aborted)' : ''}`, {
            details: { destinationMayBeWritten: true },
          }),
        });
    });
    return result;
  }

  /** Waits for every pull still out (each ends by its own deadline), so their destinations are no longer written. */
  async close(): Promise<void> {
    await Promise.allSettled([...this.inflight]);
  }
}

export function createECConsumer(options: ECConsumerOptions = {}): Promise<ECPullConsumer> {
  return ECPullConsumer.create(options);
}
