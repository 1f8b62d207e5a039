// A transport as the engine holds it: each call of its SPI methods answers a TransferError
// naming the plugin, whatever the plugin did (threw, returned something that is not a
// promise, rejected with a string, resolved with nothing), and every call but submit (which
// the watchdog bounds per batch) settles within a bound even if the plugin never answers. A
// plugin may come from a third party; its bug is reported as its own, and does not hang
// close(), hold the engine's registration queue for good, or reach the caller as a plain
// TypeError.
import { TransferError, isTransferError } from '../errors/transfer-error.js';
import { isTransferErrorCode } from '../errors/codes.js';
import type { TransportRegistration } from '../spi/memory.js';
import type { Transport } from '../spi/transport.js';
import type { Log } from './logger.js';

/** How long `close()` and `closePeer()` of a transport may take before the engine goes on without them. */
export const TRANSPORT_CLOSE_BOUND_MS = 10_000;
/** Past the deadline the plugin was given, how long `openPeer()` and `lookupSegment()` may take before the engine stops waiting. */
export const OPEN_PEER_GRACE_MS = 2_000;

/** The bounds a held transport's calls settle within (from the engine's `timeouts`). */
export interface TransportBounds {
  /** `timeouts.connectMs`: the plugin's own connect deadline; openPeer gets OPEN_PEER_GRACE_MS more. */
  connectTimeoutMs: number;
  /** `timeouts.registerMs`: registerMemory, unregisterMemory, allocateMemory, freeMemory. */
  registerMs: number;
}

/** Wraps `transport` (see the module); `submit` is passed through, checked per batch by the watchdog. */
export function guardTransport(plugin: string, transport: Transport, bounds: TransportBounds, log: Log): Transport {
  const call = <T>(method: string, run: () => Promise<T>, boundMs: number, late?: (value: T) => unknown): Promise<T> =>
    guarded({ plugin, method, log, boundMs, late }, run);
  const { registerMs } = bounds;
  const guardedTransport: Transport = {
    endpoint: () => transport.endpoint(),
    // A registration or a peer that arrives after its bound is not given back: the caller may
    // have registered the same buffer again (or opened the same peer), and a plugin may answer
    // both calls with the same address or object. It is logged (`late`), and stays the plugin's.
    registerMemory: (request) =>
      call('registerMemory', () => transport.registerMemory(request), registerMs).then((r) => checkRegistration(plugin, 'registerMemory', r)),
    unregisterMemory: (addr) => call('unregisterMemory', () => transport.unregisterMemory(addr), registerMs),
    openPeer: (peer) =>
      call('openPeer', () => transport.openPeer(peer), bounds.connectTimeoutMs + OPEN_PEER_GRACE_MS).then((p) => {
        if (typeof p !== 'object' || p === null)
          throw new TransferError('INTERNAL', `transport ${plugin}'s openPeer resolved with ${String(p)}, not a peer`, { plugin });
        return p;
      }),
    closePeer: (peer) => call('closePeer', () => transport.closePeer(peer), TRANSPORT_CLOSE_BOUND_MS),
    submit: transport.submit.bind(transport),
    close: () => call('close', () => transport.close(), TRANSPORT_CLOSE_BOUND_MS),
  };
  if (transport.allocateMemory)
    guardedTransport.allocateMemory = (length, device) =>
      // An allocation that arrives after its bound is fresh memory nobody else holds: freed.
      call(
        'allocateMemory',
        () => transport.allocateMemory!(length, device),
        registerMs,
        (a) => transport.freeMemory?.(a.addr),
      ).then((a) => checkRegistration(plugin, 'allocateMemory', a));
  if (transport.freeMemory) guardedTransport.freeMemory = (addr) => call('freeMemory', () => transport.freeMemory!(addr), registerMs);
  if (transport.reaches) guardedTransport.reaches = (peer) => transport.reaches!(peer);
  if (transport.lookupSegment)
    guardedTransport.lookupSegment = (segment, timeoutMs) =>
      call('lookupSegment', () => transport.lookupSegment!(segment, timeoutMs), timeoutMs + OPEN_PEER_GRACE_MS);
  if (transport.onNotification) guardedTransport.onNotification = (listener) => transport.onNotification!(listener);
  if (transport.describe) guardedTransport.describe = () => transport.describe!();
  return guardedTransport;
}

interface GuardedCall<T> {
  plugin: string;
  method: string;
  log: Log;
  boundMs: number;
  /** What to do with a value the plugin resolves with after the bound passed (it is logged either way). */
  late: ((value: T) => unknown) | undefined;
}

function guarded<T>({ plugin, method, log, boundMs, late }: GuardedCall<T>, run: () => Promise<T>): Promise<T> {
  let started: unknown;
  try {
    started = run();
  } catch (error) {
    return Promise.reject(asTransferError(plugin, method, error, 'threw'));
  }
  if (typeof (started as Promise<T> | null)?.then !== 'function') {
    // A method that settles at once may return undefined instead of a resolved promise; a value
    // where one is expected is checked by the caller's own check.
    return Promise.resolve(started as T);
  }
  const settled = (started as Promise<T>).then(undefined, (error: unknown) => {
    throw asTransferError(plugin, method, error, 'rejected with');
  });
  return new Promise<T>((resolve, reject) => {
    let timedOut = false;
    const timer = setTimeout(() => {
      timedOut = true;
      log('error', `transport ${plugin} did not settle ${method}() within ${boundMs} ms; the engine goes on without it`);
      reject(new TransferError('TIMEOUT', `transport ${plugin} did not settle ${method}() within ${boundMs} ms`, { plugin }));
    }, boundMs);
    settled.then(
      (value) => {
        clearTimeout(timer);
        if (!timedOut) return resolve(value);
        log('error', `transport ${plugin} settled ${method}() after the engine stopped waiting${late ? '; what it gave is given back' : ''}`);
        if (late && value !== undefined && value !== null)
          void Promise.resolve()
            .then(() => late(value))
            .catch(() => undefined);
      },
      (error: unknown) => (clearTimeout(timer), reject(error)),
    );
  });
}

/**
 * What a plugin threw or rejected with, as the engine hands it on: its own TransferError, or
 * INTERNAL naming the plugin for anything else, a TransferError whose code is not one of
 * te's included (callers switch on `code`, and an unknown one matches none of their cases).
 */
export function asTransferError(plugin: string, method: string, error: unknown, how: string): TransferError {
  if (isTransferError(error) && isTransferErrorCode(error.code)) return error;
  const what = isTransferError(error) ? `a TransferError with the unknown code ${JSON.stringify(String(error.code))}` : 'a non-TransferError';
  return new TransferError('INTERNAL', `transport ${plugin}'s ${method}() ${how} ${what}: ${(error as Error)?.message ?? String(error)}`, {
    plugin,
    cause: error,
  });
}

function checkRegistration<R extends TransportRegistration>(plugin: string, method: string, r: R): R {
  if (typeof r !== 'object' || r === null || typeof r.addr !== 'bigint' || typeof r.length !== 'bigint')
    throw new TransferError(
      'INTERNAL',
      `transport ${plugin}'s ${method}() resolved with ${r === null ? 'null' : typeof r}, not { addr: bigint, length: bigint }`,
      {
        plugin,
      },
    );
  return r;
}
