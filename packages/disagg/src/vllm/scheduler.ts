import { randomBytes } from 'node:crypto';
import { TransferError } from '@te/connector';
import type { KVConnectorMeta, KVTransferParams, KVRequestView } from './types.js';
import { expectObject } from '../shared/expect-object.js';

export interface SchedulerOptions {
  role: 'prefill' | 'decode';
  /** Prefill: where decode instances reach this instance's bootstrap server. */
  bootstrapHost?: string;
  bootstrapPort?: number;
  engineId?: string;
  tpSize?: number;
  /** Prefill: send each layer during the forward pass (the worker must be layerwise too). */
  layerwise?: boolean;
}

function randomRoom(): string {
  return (randomBytes(8).readBigUInt64LE() & ((1n << 63n) - 1n)).toString();
}

/**
 * The scheduler half of vLLM's KVConnectorBase_V1 over the PD runtime. Holds no memory;
 * decides which requests load or send, and hands the worker one metadata object per step.
 */
export class KVConnectorScheduler {
  private loads: KVConnectorMeta['loads'] = [];
  private sends: KVConnectorMeta['sends'] = [];
  private aborts: string[] = [];
  private finished: string[] = [];
  /** Prefill, layerwise: requests whose send was queued at allocation, with their room. */
  private readonly queued = new Map<string, string>();

  constructor(readonly options: SchedulerOptions) {
    expectObject(options, "KVConnectorScheduler's options");
    if (options.role === 'prefill' && (!options.bootstrapHost || !options.bootstrapPort)) {
      throw new TransferError(
        'INVALID_ARGUMENT',
        'a prefill scheduler needs bootstrapHost and bootstrapPort (where decode instances reach its bootstrap server)',
      );
    }
  }

  /**
   * Tokens the decode will receive from the prefill instead of computing, and whether the
   * load is asynchronous (across steps). Side-effect free: vLLM may call it repeatedly.
   */
  getNumNewMatchedTokens(request: KVRequestView, numComputedTokens: number): [number, boolean] {
    if (this.options.role === 'decode' && request.kvTransferParams?.do_remote_prefill) return [Math.max(0, request.promptTokens - numComputedTokens), true];
    return [0, false];
  }

  /** Blocks were allocated: queue the pull (once: do_remote_prefill is cleared). */
  updateStateAfterAlloc(request: KVRequestView, blockIds: number[], numExternalTokens: number): void {
    const params = request.kvTransferParams;
    if (this.options.role === 'prefill' && this.options.layerwise && params?.do_remote_decode && !this.queued.has(request.requestId)) {
      // Layerwise: the send starts with this step's forward pass, under a room fixed now
      // (the proxy's, when it dispatched both sides at once, so the decode is already waiting).
      const room = params.remote_request_id ?? randomRoom();
      this.queued.set(request.requestId, room);
      this.sends.push({ requestId: request.requestId, blockIds: [...blockIds], room, layerwise: true });
      return;
    }
    if (this.options.role !== 'decode' || !params?.do_remote_prefill) return;
    if (numExternalTokens > 0) {
      if (!params.remote_host || !params.remote_port || !params.remote_request_id) {
        throw new TransferError('INVALID_ARGUMENT', `request ${request.requestId}: kv_transfer_params lack remote_host, remote_port or remote_request_id`);
      }
      this.loads.push({ requestId: request.requestId, blockIds: [...blockIds], params: { ...params } });
    }
    params.do_remote_prefill = false;
  }

  /** This step's work for the workers; resets the queue. */
  buildConnectorMeta(): KVConnectorMeta {
    const meta: KVConnectorMeta = { loads: this.loads, sends: this.sends };
    if (this.aborts.length > 0) meta.aborts = this.aborts;
    if (this.finished.length > 0) meta.finished = this.finished;
    this.loads = [];
    this.sends = [];
    this.aborts = [];
    this.finished = [];
    return meta;
  }

  /**
   * The request finished. A length-capped prefill request hands its KV off: blocks stay
   * allocated until the worker reports it in `getFinished` (`true`), and the returned
   * params go into the response for the proxy to copy into the decode request.
   *
   * A layerwise send started with the forward pass may still be reading the blocks of a
   * request that finishes otherwise (stopped, aborted): it is aborted, and the blocks stay
   * allocated (`true`) until the worker reports the send ended in `getFinished`, which it
   * does once no write of it is in flight.
   *
   * A layerwise send may also have ended (even settled on the worker) before this is
   * called. This still returns `true`, and the worker holds the send's finished_sending
   * report until the scheduler finished the request (the next metadata's `finished` or
   * `aborts`, or vLLM's finished_req_ids passed to getFinished). That is the contract in
   * vLLM's connector (connector-contracts.md §3.2-3.3): request_finished runs before the
   * blocks are freed, `true` hands them to the connector until the id appears in
   * get_finished, and get_finished reports only ids the scheduler already finished (vLLM
   * frees the blocks of every finished_sending id it gets). Reporting earlier frees a
   * running request's blocks, or, as `true` after it did, leaks them. The other way,
   * `false` for a send "already reported", would need the scheduler to know of the
   * worker's reports (another process, a step late) and frees twice when a report races
   * this call. So the blocks are freed exactly once: by the report after this call.
   */
  requestFinished(request: KVRequestView, blockIds: number[]): [boolean, KVTransferParams | null] {
    const params = request.kvTransferParams;
    const queued = this.queued.get(request.requestId);
    this.queued.delete(request.requestId);
    if (this.options.role !== 'prefill' || !params?.do_remote_decode || request.finishReason !== 'length') {
      if (queued === undefined) return [false, null];
      const pending = this.sends.findIndex((s) => s.requestId === request.requestId);
      if (pending >= 0) {
        // Not handed to the worker yet: nothing started, nothing to wait for.
        this.sends.splice(pending, 1);
        return [false, null];
      }
      this.aborts.push(request.requestId);
      return [true, null];
    }
    const room = queued ?? params.remote_request_id ?? randomRoom();
    if (queued === undefined) this.sends.push({ requestId: request.requestId, blockIds: [...blockIds], room });
    else this.finished.push(request.requestId); // its send may still be in this step's `sends`: the worker starts those first
    return [
      true,
      {
        do_remote_prefill: true,
        do_remote_decode: false,
        remote_host: this.options.bootstrapHost!,
        remote_port: this.options.bootstrapPort!,
        remote_engine_id: this.options.engineId ?? null,
        remote_block_ids: [...blockIds],
        remote_request_id: room,
        tp_size: this.options.tpSize ?? 1,
      },
    ];
  }
}
