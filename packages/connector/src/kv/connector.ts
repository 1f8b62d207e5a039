import type { TransferError } from '../errors/transfer-error.js';
import type { TransferEngine } from '../engine/transfer-engine.js';
import type { BootstrapInfo, KVBuffers, ParallelLayout } from './layout.js';
import type { KVStatus, StatusCell } from './status.js';

/** Timeouts of the PD protocol (SGLang's bootstrap / waiting timeouts and heartbeats). */
export interface KVTimeouts {
  /** Prefill side: how long a request may wait for its decode peer to send the destination (SGLang's bootstrap timeout). */
  bootstrapMs: number;
  /** Decode side: how long a bootstrapped request may wait for its KV to arrive (SGLang's waiting timeout). */
  waitingMs: number;
  /** Interval of heartbeats to the bootstrap server; a peer missing several fails its rooms. */
  heartbeatMs: number;
}

export interface KVManagerOptions {
  role: 'prefill' | 'decode';
  layout: ParallelLayout;
  buffers: KVBuffers;
  /** The shared engine; by default `getTransferEngine()`. */
  engine?: TransferEngine;
  /** Prefill: where its bootstrap server listens (one per prefill instance). */
  bootstrapPort?: number;
  timeouts?: Partial<KVTimeouts>;
  /** Send each layer as soon as it is written (see `KVSender.layerReady`). */
  layerwise?: boolean;
}

/** The common face of a sender and a receiver: one request's status. */
export interface KVRequest {
  readonly room: bigint;
  /** The status now (SGLang's `poll()`). */
  readonly status: KVStatus;
  /** The cell behind `status`: `reached(Success)` to await, `on('status')` to observe. */
  readonly cell: StatusCell;
  /** Why the request failed, once it has. */
  readonly failure: TransferError | undefined;
  /**
   * Aborts the request on both sides. On the decode side the returned promise resolves
   * only when no more bytes can land in its pages, so they may be freed then.
   */
  abort(reason?: string): Promise<void>;
}

/** Prefill side of one request (SGLang's KVSender). */
export interface KVSender extends KVRequest {
  /** Declares how many pages will be sent and which aux slot carries the metadata. */
  init(numPages: number, auxIndex?: number): void;
  /**
   * Sends a chunk of pages (chunked prefill calls it several times); `last` marks the
   * final chunk, after which aux and state data follow and the request moves to Success.
   */
  send(pageIndices: Uint32Array, options?: { last?: boolean; stateIndices?: Uint32Array }): Promise<void>;
  /** Layerwise transfer: layer `layer` of this request's KV is written; send it now. */
  layerReady(layer: number): void;
}

/** Decode side of one request (SGLang's KVReceiver). */
export interface KVReceiver extends KVRequest {
  /** Tells the prefill where to write: destination pages, aux slot and state slots. */
  init(pageIndices: Uint32Array, auxIndex: number, stateIndices?: Uint32Array): Promise<void>;
}

/** One per rank (SGLang's KVManager; vLLM's connector worker side). */
export interface KVManager {
  readonly role: 'prefill' | 'decode';
  readonly layout: ParallelLayout;
  createSender(bootstrap: BootstrapInfo): KVSender;
  createReceiver(bootstrap: BootstrapInfo): KVReceiver;
  close(): Promise<void>;
}

/** Prefill's bootstrap server (one per prefill instance), which decode ranks query for the layout. */
export interface KVBootstrapServer {
  readonly host: string;
  readonly port: number;
  close(): Promise<void>;
}
