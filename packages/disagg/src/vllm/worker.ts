import { KVStatus, StatusCell, TransferError, isTransferError, type KVBuffers, type KVReceiver, type KVRequest, type KVSender } from '@te/connector';
import { createKVManager, type CreateKVManagerOptions, type DisaggKVManager } from '../pd/create.js';
import type { BatchEntry, LayerwiseBatch } from '../pd/layerwise.js';
import type { KVConnectorMeta, LayerCache } from './types.js';
import { blockCountOf, blockIdsOf, layerRegionsOf } from './inputs.js';
import { expectObject } from '../shared/expect-object.js';

export interface WorkerOptions extends Omit<CreateKVManagerOptions, 'buffers'> {
  /** Blocks per layer cache and tokens per block. */
  numBlocks: number;
  blockSize: number;
  kvCacheDtype: string;
  device?: KVBuffers['device'];
  /** Needed when prefill and decode attention TP differ (head slicing). */
  totalKvHeads?: number;
  kvHeadsPerRank?: number;
}

interface Active {
  request: KVRequest;
  direction: 'send' | 'recv';
  blockIds: number[];
  /**
   * Send: the scheduler ran requestFinished for it (returning delay_free), so vLLM frees
   * the blocks when `getFinished` lists it. False only for a layerwise send, which starts
   * with the forward pass, before the request finished.
   */
  released: boolean;
}

/**
 * The worker half of vLLM's KVConnectorBase_V1 over the PD runtime: registers the layer
 * caches, starts sends (prefill) and pulls (decode) from each step's metadata, and
 * reports finished and failed requests. Transfers run in the background; nothing here
 * blocks the forward pass.
 */
export class KVConnectorWorker {
  private manager: DisaggKVManager | undefined;
  private readonly active = new Map<string, Active>();
  private readonly done = { sending: new Set<string>(), recving: new Set<string>() };
  /**
   * Layerwise sends that ended before the scheduler finished their request: reported in
   * `sending` only once it did (see `release`). Bounded by the requests in flight: vLLM
   * calls request_finished for every request it scheduled.
   */
  private readonly unreleased = new Set<string>();
  private readonly failedBlocks = new Set<number>();
  private readonly layerIndex = new Map<string, number>();
  private forward: LayerwiseBatch | undefined;
  /** `numBlocks`, checked by registerKvCaches. */
  private blocks = 0n;

  constructor(readonly options: WorkerOptions) {
    expectObject(options, "KVConnectorWorker's options");
  }

  get kvManager(): DisaggKVManager | undefined {
    return this.manager;
  }

  /** vLLM's register_kv_caches: every layer's region, in layer order. */
  async registerKvCaches(layers: LayerCache[]): Promise<void> {
    if (this.manager) throw new TransferError('INVALID_ARGUMENT', 'registerKvCaches was already called');
    const blocks = blockCountOf(this.options.numBlocks);
    const { regions, half } = layerRegionsOf(layers, blocks);
    this.blocks = blocks;
    const buffers: KVBuffers = {
      kv: {
        addrs: BigUint64Array.from(regions),
        lengths: BigUint64Array.from(regions.map(() => half)),
        itemLengths: BigUint64Array.from(regions.map(() => half / blocks)),
      },
      attention: 'mha',
      numLayers: layers.length,
      pageSize: this.options.blockSize,
      kvCacheDtype: this.options.kvCacheDtype,
      aux: { addrs: new BigUint64Array(0), lengths: new BigUint64Array(0), itemLengths: new BigUint64Array(0) },
      device: this.options.device ?? 'cpu',
    };
    if (this.options.totalKvHeads !== undefined) buffers.totalKvHeads = this.options.totalKvHeads;
    if (this.options.kvHeadsPerRank !== undefined) buffers.kvHeadsPerRank = this.options.kvHeadsPerRank;
    this.manager = await createKVManager({ ...this.options, buffers });
    layers.forEach((l, i) => this.layerIndex.set(l.name, i));
  }

  private need(): DisaggKVManager {
    if (!this.manager) throw new TransferError('INVALID_ARGUMENT', 'registerKvCaches must be called first');
    return this.manager;
  }

  /**
   * Starts this step's pulls (decode) and sends (prefill); returns at once. A request that
   * cannot start (bad kv_transfer_params, a refused room) fails alone, reported by
   * `getFinished` like any failed transfer; the step's other requests still start.
   */
  startLoadKv(meta: KVConnectorMeta): void {
    const m = this.need();
    for (const requestId of meta.aborts ?? []) {
      const a = this.active.get(requestId);
      if (a?.direction === 'send') void a.request.abort('the request finished without handing off its KV').catch(() => undefined);
      this.release(requestId);
    }
    for (const load of meta.loads) {
      const p = load.params;
      let receiver: KVReceiver;
      let pages: Uint32Array;
      try {
        pages = blockIdsOf(load.requestId, load.blockIds, this.blocks);
        receiver = m.createReceiver({ host: p.remote_host!, port: p.remote_port!, room: roomOf(p.remote_request_id, load.requestId) });
      } catch (e) {
        this.track(load.requestId, failedRequest(e, load.requestId), 'recv', load.blockIds);
        continue;
      }
      this.track(load.requestId, receiver, 'recv', load.blockIds);
      receiver.init(pages, 0).catch(() => undefined); // the failure is on the cell
    }
    const layerwise: BatchEntry[] = [];
    for (const send of meta.sends) {
      let sender: KVSender | undefined;
      let pages: Uint32Array;
      try {
        pages = blockIdsOf(send.requestId, send.blockIds, this.blocks);
        sender = m.createSender({
          host: this.options.bootstrapHost ?? '127.0.0.1',
          port: m.bootstrapServer?.port ?? this.options.bootstrapPort ?? 8998,
          room: roomOf(send.room, send.requestId),
        });
        sender.init(send.blockIds.length);
      } catch (e) {
        // Nothing was written: the blocks may be freed, as for any send that ended.
        void sender?.abort().catch(() => undefined);
        this.track(send.requestId, failedRequest(e, send.requestId), 'send', send.blockIds, !send.layerwise);
        continue;
      }
      this.track(send.requestId, sender, 'send', send.blockIds, !send.layerwise);
      if (send.layerwise) layerwise.push({ sender, pages });
      else sender.send(pages, { last: true }).catch(() => undefined);
    }
    // The batch-start marker: requests whose decode is not registered yet fall back (counted).
    if (layerwise.length > 0) this.forward = m.beginBatch(layerwise);
    // After the sends: a request may finish in the step its layerwise send was queued.
    for (const requestId of meta.finished ?? []) this.release(requestId);
  }

  private track(requestId: string, request: KVRequest, direction: 'send' | 'recv', blockIds: number[], released = true): void {
    const entry: Active = { request, direction, blockIds, released };
    this.active.set(requestId, entry);
    const settle = (): void => {
      if (this.active.get(requestId) === entry) this.active.delete(requestId);
      if (direction === 'send' && !entry.released) this.unreleased.add(requestId);
      else (direction === 'send' ? this.done.sending : this.done.recving).add(requestId);
      // Ids that are not blocks of this worker (a request refused for them) are not reported.
      if (direction === 'recv' && request.status === KVStatus.Failed)
        for (const b of blockIds) if (Number.isInteger(b) && b >= 0 && b < this.blocks) this.failedBlocks.add(b);
    };
    // A failed send is reported (its blocks freed) only once none of its writes is in
    // flight: the sender's abort resolves then.
    request.cell.reached(KVStatus.Success).then(settle, () => (direction === 'send' ? request.abort().then(settle, settle) : settle()));
  }

  /**
   * The scheduler finished this request with delay_free (its send may now be reported in
   * finished_sending). An id with no send here (most finished requests) is ignored.
   */
  private release(requestId: string): void {
    if (this.unreleased.delete(requestId)) {
      this.done.sending.add(requestId);
      return;
    }
    const a = this.active.get(requestId);
    if (a?.direction === 'send') a.released = true;
  }

  /** The transfer status of a request still in flight (undefined once it ended). */
  status(requestId: string): KVStatus | undefined {
    return this.active.get(requestId)?.request.status;
  }

  /**
   * Decode: loads are asynchronous across steps (the request waits in vLLM's
   * WAITING_FOR_REMOTE_KVS until `getFinished` lists it), so a scheduled request's layers
   * are all present: nothing to wait for.
   */
  async waitForLayerLoad(_layerName: string): Promise<void> {}

  /** Prefill, layerwise: this layer's KV is stored; its transfer starts now, under the next layers' compute. */
  saveKvLayer(layerName: string, ready?: () => Promise<unknown>): void {
    if (!this.forward) return;
    const i = this.layerIndex.get(layerName);
    if (i === undefined) throw new TransferError('INVALID_ARGUMENT', `unknown layer "${layerName}" (not in registerKvCaches)`);
    this.forward.layerReady(i, ready);
  }

  /** End of the forward pass: layers never marked are sent now; resolves when the layerwise rooms settled. */
  async waitForSave(): Promise<void> {
    const batch = this.forward;
    this.forward = undefined;
    await batch?.finishLayerwise();
  }

  /**
   * Requests whose transfer ended since the last call: sending (the prefill may free the
   * blocks) and receiving (the decode may schedule it; failed ones are also listed in
   * `getBlockIdsWithLoadErrors`).
   *
   * `finishedRequestIds` is vLLM's `scheduler_output.finished_req_ids` (requests the
   * scheduler finished since the last step): a send is reported only for a request the
   * scheduler finished, told here or by the step's metadata (`finished`, `aborts`).
   */
  getFinished(finishedRequestIds?: Iterable<string>): { sending: Set<string>; recving: Set<string> } {
    for (const id of finishedRequestIds ?? []) this.release(id);
    const out = { sending: new Set(this.done.sending), recving: new Set(this.done.recving) };
    this.done.sending.clear();
    this.done.recving.clear();
    return out;
  }

  /** Blocks of failed loads since the last call (vLLM then recomputes or fails per its policy). */
  getBlockIdsWithLoadErrors(): Set<number> {
    const out = new Set(this.failedBlocks);
    this.failedBlocks.clear();
    return out;
  }

  async shutdown(): Promise<void> {
    await this.manager?.close();
  }
}

/** The room of a request: kv_transfer_params carry it as a decimal u63 string. */
function roomOf(id: unknown, requestId: string): bigint {
  if (typeof id !== 'string' || !/^\d{1,19}$/.test(id))
    throw new TransferError(
      'INVALID_ARGUMENT',
      `request ${requestId}: remote_request_id must be a decimal u63 string, got ${JSON.stringify(id)?.slice(0, 64)}`,
    );
  return BigInt(id);
}

/** A request that failed before its transfer could start, reported like any failed one. */
function failedRequest(e: unknown, requestId: string): KVRequest {
  const error = isTransferError(e) ? e : new TransferError('INVALID_ARGUMENT', `request ${requestId}: ${(e as Error)?.message ?? String(e)}`, { cause: e });
  const cell = new StatusCell(KVStatus.Bootstrapping);
  cell.fail(error);
  return { room: 0n, cell, status: KVStatus.Failed, failure: error, abort: async () => undefined };
}
