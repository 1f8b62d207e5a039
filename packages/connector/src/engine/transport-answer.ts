// What a transport's submit gave back, checked before the engine believes it. A transport
// is a plugin, a third party's too: one that breaks the SPI's contract gets INTERNAL naming
// it, never a success for requests it said nothing about, and never a plain TypeError.
import { TransferError } from '../errors/transfer-error.js';
import type { BatchResult, SubmitOptions, TransferBatch } from '../spi/batch.js';
import type { Transport, TransportPeer } from '../spi/transport.js';

const INT32_MIN = -(2 ** 31);
const INT32_MAX = 2 ** 31 - 1;

/** The transport's `submit`, called so that a throw or a value that is not a promise becomes a rejected promise. */
export function submitThrough(plugin: string, transport: Transport, peer: TransportPeer, batch: TransferBatch, options: SubmitOptions): Promise<BatchResult> {
  let submitted: unknown;
  try {
    submitted = transport.submit(peer, batch, options);
  } catch (error) {
    // Nothing was started that the engine could wait for: the batch is settled.
    return Promise.reject(
      new TransferError('INTERNAL', `transport ${plugin} threw from submit instead of rejecting: ${(error as Error)?.message ?? String(error)}`, {
        plugin,
        cause: error,
      }),
    );
  }
  if (typeof (submitted as Promise<unknown> | null)?.then !== 'function')
    return Promise.reject(new TransferError('INTERNAL', `transport ${plugin} returned ${describe(submitted)} from submit, not a promise`, { plugin }));
  return submitted as Promise<BatchResult>;
}

/**
 * The transport's result for `batch`, as the engine uses it: one Int32Array status per
 * request and a bigint byte count. An array of integers, or a safe integer count, is
 * taken as such; anything else (a status missing, one that is not an integer, no result)
 * is INTERNAL, since the engine cannot tell which requests landed.
 */
export function checkedResult(plugin: string, batch: TransferBatch, result: unknown): BatchResult {
  const requests = batch.opcodes.length;
  const r = result as Partial<BatchResult> | null | undefined;
  // The common case, at the cost of three checks per batch.
  if (r?.statuses instanceof Int32Array && r.statuses.length === requests && typeof r.bytes === 'bigint' && r.bytes >= 0n) return r as BatchResult;
  if (typeof r !== 'object' || r === null)
    throw broken(plugin, `settled a batch of ${requests} requests with ${describe(result)} instead of { statuses, bytes }`);
  const statuses = r.statuses as ArrayLike<unknown> | undefined;
  if (statuses === null || typeof statuses !== 'object' || typeof statuses.length !== 'number')
    throw broken(plugin, `settled a batch of ${requests} requests without a statuses array (got ${describe(statuses)})`);
  if (statuses.length !== requests) throw broken(plugin, `settled a batch of ${requests} requests with ${statuses.length} statuses`);
  let checked = statuses as Int32Array;
  if (!(statuses instanceof Int32Array)) {
    checked = new Int32Array(requests);
    for (let i = 0; i < requests; i++) {
      const s = statuses[i];
      if (!Number.isInteger(s) || (s as number) < INT32_MIN || (s as number) > INT32_MAX)
        throw broken(plugin, `gave request ${i} the status ${describe(s)}, not an integer`);
      checked[i] = s as number;
    }
  }
  const bytes = r.bytes as unknown;
  let count: bigint;
  if (typeof bytes === 'bigint' && bytes >= 0n) count = bytes;
  else if (Number.isSafeInteger(bytes) && (bytes as number) >= 0) count = BigInt(bytes as number);
  else throw broken(plugin, `settled a batch with ${describe(bytes)} as its byte count, not a non-negative integer`, false);
  return { statuses: checked, bytes: count };
}

function broken(plugin: string, what: string, outcomeUnknown = true): TransferError {
  return new TransferError(
    'INTERNAL',
    `transport ${plugin} broke the transport contract: it ${what}${outcomeUnknown ? '; which requests landed is unknown' : ''}`,
    { plugin },
  );
}

function describe(value: unknown): string {
  if (value === null) return 'null';
  if (typeof value === 'bigint') return `${value}n`;
  if (typeof value === 'number') return String(value);
  if (typeof value === 'string') return JSON.stringify(value.length > 40 ? `${value.slice(0, 40)}…` : value);
  if (typeof value === 'object') return `an object (${(value as object).constructor?.name ?? 'no prototype'})`;
  return String(value);
}
