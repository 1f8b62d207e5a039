import { TransferError } from '@te/connector';
import type { NativeCudaModule } from './native-types.js';

/**
 * CUDA events awaited off the JS thread: the readiness hook a framework hands te when its
 * GPU work is queued but not done (the layerwise `layerReady(layer, ready)`, an encoder's
 * output before the EC producer serves it). The event is recorded when `record` is called,
 * so it covers exactly the work queued on the stream by then; one native thread polls it.
 */
export interface CudaEvents {
  /**
   * Records an event on `stream` (a cudaStream_t as bigint, e.g. PyTorch's
   * `torch.cuda.current_stream().cuda_stream`; 0n is the legacy default stream) of
   * `device` now. Resolves once the GPU has passed it; rejects with a TransferError:
   * NO_DEVICE without a GPU, TRANSFER_FAILED when work before it faulted on the device,
   * POOL_EXHAUSTED past 4096 pending events, ABORTED when the process shuts down.
   */
  record(stream?: bigint, device?: number | `cuda:${number}`): Promise<void>;
  /**
   * `record` now, returned as the thunk `layerReady(layer, ready)` takes. The promise exists
   * from now on (a failure before the thunk is called is not an unhandled rejection; it is
   * delivered to whoever calls the thunk).
   */
  readyAfter(stream?: bigint, device?: number | `cuda:${number}`): () => Promise<void>;
  /** Events recorded and not yet settled. */
  pending(): number;
}

function ordinalOf(device: number | string | undefined, plugin: string): number {
  if (device === undefined) return 0;
  if (typeof device === 'number' && Number.isInteger(device) && device >= 0) return device;
  const m = typeof device === 'string' ? /^cuda:(\d+)$/.exec(device) : null;
  if (m) return Number(m[1]);
  throw new TransferError('INVALID_ARGUMENT', `Expected \`device\` to be a GPU ordinal or "cuda:N", got ${String(device)}`, { plugin });
}

function streamOf(stream: bigint | undefined, plugin: string): bigint {
  if (stream === undefined) return 0n;
  if (typeof stream === 'bigint' && stream >= 0n && stream < 1n << 64n) return stream;
  throw new TransferError(
    'INVALID_ARGUMENT',
    `Expected \`stream\` to be a cudaStream_t as a non-negative bigint, got ${typeof stream === 'bigint' ? stream : typeof stream}`,
    { plugin },
  );
}

export function cudaEventsOf(load: () => NativeCudaModule, plugin: string): CudaEvents {
  const record = (stream?: bigint, device?: number | `cuda:${number}`): Promise<void> => {
    try {
      return load().events.record(ordinalOf(device, plugin), streamOf(stream, plugin));
    } catch (e) {
      return Promise.reject(e);
    }
  };
  return {
    record,
    readyAfter(stream, device) {
      const done = record(stream, device);
      done.catch(() => undefined);
      return () => done;
    },
    pending: () => load().events.pending(),
  };
}
