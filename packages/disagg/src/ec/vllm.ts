import { TransferError, type ECItemParams, type ECLoadResult, type ECTransferParams } from '@te/connector';
import type { ECPullConsumer } from './consumer.js';
import type { ECPoolProducer } from './producer.js';
import { expectObject } from '../shared/expect-object.js';

/** The part of a vLLM request the EC connector reads. */
export interface ECRequestView {
  requestId: string;
  /** mm_hash of each multimodal item, in order. */
  mmHashes: string[];
  ecTransferParams?: ECTransferParams | null;
}

/** Scheduler → worker, once per step. */
export interface ECConnectorMeta {
  loads: { requestId: string; mmHash: string; params: ECItemParams }[];
}

/**
 * The scheduler half of vLLM's ECConnectorBase over the EC connector. On a consumer
 * (prefill) `hasCacheItem` is optimistic, as vLLM's Mooncake EC connector: an item with
 * remote params counts as available; a failed load is encoded locally later.
 */
export class ECConnectorScheduler {
  private loads: ECConnectorMeta['loads'] = [];

  constructor(readonly options: { role: 'producer' | 'consumer'; producer?: ECPoolProducer }) {
    expectObject(options, "ECConnectorScheduler's options");
    // Any other role would be served as a consumer without a word.
    if (options.role !== 'producer' && options.role !== 'consumer')
      throw new TransferError(
        'INVALID_ARGUMENT',
        `Expected ECConnectorScheduler's role to be 'producer' or 'consumer', got ${JSON.stringify(options.role) ?? 'undefined'}`,
      );
    if (options.role === 'producer' && !options.producer)
      throw new TransferError('INVALID_ARGUMENT', 'a producer EC scheduler needs its producer (for the params it returns)');
  }

  hasCacheItem(mmHash: string, request?: ECRequestView): boolean {
    if (this.options.role === 'producer') return this.options.producer!.has(mmHash);
    const p = request?.ecTransferParams?.[mmHash];
    return Boolean(p?.do_remote_encode && p.remote_host && p.remote_port);
  }

  /** The item's encoder-cache slot is allocated: pull it (once: do_remote_encode is cleared). */
  updateStateAfterAlloc(request: ECRequestView, index: number): void {
    const mmHash = request.mmHashes[index];
    if (mmHash === undefined) throw new TransferError('INVALID_ARGUMENT', `request ${request.requestId} has no multimodal item ${index}`);
    const p = request.ecTransferParams?.[mmHash];
    if (this.options.role !== 'consumer' || !p?.do_remote_encode) return;
    this.loads.push({ requestId: request.requestId, mmHash, params: { ...p } });
    p.do_remote_encode = false;
  }

  buildConnectorMeta(): ECConnectorMeta {
    const meta = { loads: this.loads };
    this.loads = [];
    return meta;
  }

  /** Producer: the params of the request's items, for the response the proxy forwards. */
  requestFinished(request: ECRequestView): [boolean, ECTransferParams | null] {
    if (this.options.role !== 'producer') return [false, null];
    const params = this.options.producer!.transferParams(request.mmHashes);
    return [Object.keys(params).length > 0, params];
  }
}

/** Where the worker's encoder cache keeps an item: registered memory it allocates. */
export interface EncoderCacheSink {
  allocate(mmHash: string, length: bigint): { addr: bigint };
}

/** The worker half of vLLM's ECConnectorBase over the EC connector. */
export class ECConnectorWorker {
  private readonly recving = new Set<string>();
  private readonly failedItems = new Map<string, Error>();
  private readonly saved = new Set<string>();

  constructor(readonly options: { producer?: ECPoolProducer; consumer?: ECPullConsumer }) {
    expectObject(options, "ECConnectorWorker's options");
  }

  /** The consumer a consumer-side call needs, or INVALID_ARGUMENT naming the call. */
  private consumer(call: string): ECPullConsumer {
    if (!this.options.consumer) throw new TransferError('INVALID_ARGUMENT', `${call} needs a consumer (ECConnectorWorker's \`consumer\`)`);
    return this.options.consumer;
  }

  /** Consumer: starts pulling this step's items into the encoder cache. */
  startLoadCaches(meta: ECConnectorMeta, cache: EncoderCacheSink): void {
    const consumer = this.consumer('startLoadCaches');
    const params: ECTransferParams = {};
    for (const l of meta.loads) params[l.mmHash] = l.params;
    consumer.startLoad(params, (h, len) => cache.allocate(h, len));
  }

  /** Consumer: resolves when this step's items arrived or failed (failed ones are encoded locally). */
  async waitForLoad(timeoutMs?: number): Promise<ECLoadResult> {
    const r = await this.consumer('waitForLoad').waitForLoad(timeoutMs !== undefined ? { timeoutMs } : {});
    for (const h of r.loaded) this.recving.add(h);
    for (const f of r.failed) this.failedItems.set(f.mmHash, f.error);
    return r;
  }

  /** Producer: one encoded item, stored in the transfer pool. */
  async saveCaches(encoderCache: Map<string, ArrayBufferView>, mmHash: string): Promise<void> {
    const embedding = encoderCache.get(mmHash);
    if (!embedding) throw new TransferError('INVALID_ARGUMENT', `no encoder output for ${mmHash}`);
    if (!this.options.producer) throw new TransferError('INVALID_ARGUMENT', "saveCaches needs a producer (ECConnectorWorker's `producer`)");
    await this.options.producer.save(mmHash, embedding);
    this.saved.add(mmHash);
  }

  /** Items saved (producer) and received (consumer) since the last call, and failed loads. */
  getFinished(): { sending: Set<string>; recving: Set<string>; failed: Map<string, Error> } {
    const out = { sending: new Set(this.saved), recving: new Set(this.recving), failed: new Map(this.failedItems) };
    this.saved.clear();
    this.recving.clear();
    this.failedItems.clear();
    return out;
  }
}
