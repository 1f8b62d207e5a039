import { KVStatus, TransferError, parseEnvBoolean, type KVSender } from '@te/connector';
import { PrefillSender } from './kv-sender.js';

/** One request of a forward batch: its sender and all of its pages (and state slots). */
export interface BatchEntry {
  sender: KVSender;
  pages: Uint32Array;
  stateIndices?: Uint32Array;
}

/** Why requests went through the normal path instead of layer by layer, by reason. */
export interface LayerwiseStats {
  layerwiseRooms: number;
  fallbacks: Record<string, number>;
}

export interface RoomResult {
  room: bigint;
  status: KVStatus;
  error?: TransferError;
}

function resultOf(s: KVSender): RoomResult {
  const r: RoomResult = { room: s.room, status: s.status };
  if (s.failure) r.error = s.failure;
  return r;
}

/**
 * Whether layerwise transfer is on: the connector option, else TE_LAYERWISE (a boolean as
 * every te variable; another value is INVALID_CONFIG), else SGLang's SGLANG_MOONCAKE_ASYNC_KV,
 * read as SGLang reads it (1, true, yes, on; anything else is off).
 */
export function layerwiseEnabled(option: boolean | undefined, env: NodeJS.ProcessEnv = process.env): boolean {
  if (option !== undefined) return option;
  if (env.TE_LAYERWISE !== undefined && env.TE_LAYERWISE.trim() !== '') return parseEnvBoolean('TE_LAYERWISE', env.TE_LAYERWISE);
  return env.SGLANG_MOONCAKE_ASYNC_KV !== undefined && /^(1|true|yes|on)$/i.test(env.SGLANG_MOONCAKE_ASYNC_KV.trim());
}

/**
 * One forward pass of a prefill batch, layer by layer. Created at batch start (the
 * marker); the framework calls `layerReady(i)` after layer i's KV is stored (with an
 * optional readiness promise, e.g. a CUDA event wait run off the JS thread) and
 * `stateReady(j)` after state tensor j; each call returns at once, the writes run in the
 * background under the remaining layers' compute. `finish()` sends whatever was never
 * marked ready, then aux, and resolves with each room's status. Requests that cannot go
 * layer by layer (chunked, destination not registered yet, ...) take the normal path at
 * `finish()`, and the reason is counted.
 */
export class LayerwiseBatch {
  private readonly layerwise: PrefillSender[] = [];
  private readonly normal: BatchEntry[] = [];
  private finishing: Promise<RoomResult[]> | undefined;

  constructor(entries: BatchEntry[], enabled: boolean, stats: LayerwiseStats, log: (message: string) => void) {
    for (const e of entries) {
      if (!(e.sender instanceof PrefillSender)) throw new TransferError('INVALID_ARGUMENT', 'a layerwise batch takes senders of this KV manager');
      if (!(e.pages instanceof Uint32Array)) throw new TransferError('INVALID_ARGUMENT', "Expected each entry's pages to be a Uint32Array");
      const reason = enabled ? e.sender.layerwiseBlocker(e.pages) : 'disabled';
      if (reason === undefined) {
        e.sender.beginLayerwise(e.pages, e.stateIndices);
        this.layerwise.push(e.sender);
        stats.layerwiseRooms++;
      } else {
        this.normal.push(e);
        stats.fallbacks[reason] = (stats.fallbacks[reason] ?? 0) + 1;
        log(`room ${e.sender.room}: normal path instead of layerwise (${reason})`);
      }
    }
  }

  /** Layer `layer` (absolute index) is stored for every request of the batch. */
  layerReady(layer: number, ready?: () => Promise<unknown>): void {
    if (this.finishing) throw new TransferError('INVALID_ARGUMENT', 'layerReady after finish()');
    for (const s of this.layerwise) s.layerReady(layer, ready);
  }

  /** State tensor `index` (one per layer for Mamba) is stored. */
  stateReady(index: number, ready?: () => Promise<unknown>): void {
    if (this.finishing) throw new TransferError('INVALID_ARGUMENT', 'stateReady after finish()');
    for (const s of this.layerwise) s.stateReady(index, ready);
  }

  /** Ends the forward pass: resolves when every room succeeded or failed (never rejects for one room). */
  finish(): Promise<RoomResult[]> {
    this.finishing ??= (async () => Promise.all([...this.startLayerwiseFinish(), ...this.startNormal()]))();
    return this.finishing;
  }

  /**
   * Ends the forward pass but waits only for the layerwise rooms; the normal-path rooms
   * go on in the background (a destination that is not there yet must not hold the
   * forward loop). Their outcome is on their senders' cells.
   */
  finishLayerwise(): Promise<RoomResult[]> {
    const layerwise = this.startLayerwiseFinish();
    this.finishing ??= Promise.all([...layerwise, ...this.startNormal()]);
    return Promise.all(layerwise);
  }

  private layerwiseResults: Promise<RoomResult>[] | undefined;
  private normalResults: Promise<RoomResult>[] | undefined;

  private startLayerwiseFinish(): Promise<RoomResult>[] {
    this.layerwiseResults ??= this.layerwise.map((s) =>
      s.finishLayerwise().then(
        () => resultOf(s),
        () => resultOf(s),
      ),
    );
    return this.layerwiseResults;
  }

  private startNormal(): Promise<RoomResult>[] {
    this.normalResults ??= this.normal.map((e) =>
      e.sender.send(e.pages, { last: true, ...(e.stateIndices ? { stateIndices: e.stateIndices } : {}) }).then(
        () => resultOf(e.sender),
        () => resultOf(e.sender),
      ),
    );
    return this.normalResults;
  }
}
