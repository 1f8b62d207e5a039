// A transport as the engine holds it: each call of its SPI methods answers a TransferError
// naming the plugin, whatever the plugin did (threw, returned something that is not a
// promise, rejected with a string, resolved with nothing), and the calls the engine makes
// while closing or forgetting a peer settle within a bound even if the plugin never
// answers. A plugin may come from a third party; its bug is reported as its own, and does
// not hang close() or reach the caller as a plain TypeError.
import { TransferError, isTransferError } from '../errors/transfer-error.js';
import type { TransportRegistration } from '../spi/memory.js';
import type { Transport } from '../spi/transport.js';
import type { Log } from './logger.js';

/** How long `close()` and `closePeer()` of a transport may take before the engine goes on without them. */
export const TRANSPORT_CLOSE_BOUND_MS = 10_000;
/** Past the connect timeout the plugin was given, how long `openPeer()` may take before the engine stops waiting. */
export const OPEN_PEER_GRACE_MS = 2_000;

/** Wraps `transport` (see the module); `submit` is passed through, checked per batch by the watchdog. */
export function guardTransport(plugin: string, transport: Transport, connectTimeoutMs: number, log: Log): Transport {
  const call = <T>(method: string, run: () => Promise<T>, boundMs?: number): Promise<T> => guarded(plugin, method, run, log, boundMs);
  const guardedTransport: Transport = {
    endpoint: () => transport.endpoint(),
    registerMemory: (request) => call('registerMemory', () => transport.registerMemory(request)).then((r) => checkRegistration(plugin, 'registerMemory', r)),
    unregisterMemory: (addr) => call('unregisterMemory', () => transport.unregisterMemory(addr)),
    openPeer: (peer) =>
      call('openPeer', () => transport.openPeer(peer), connectTimeoutMs + OPEN_PEER_GRACE_MS).then((p) => {
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
      call('allocateMemory', () => transport.allocateMemory!(length, device)).then((a) => checkRegistration(plugin, 'allocateMemory', a));
  if (transport.freeMemory) guardedTransport.freeMemory = (addr) => call('freeMemory', () => transport.freeMemory!(addr));
  if (transport.reaches) guardedTransport.reaches = (peer) => transport.reaches!(peer);
  if (transport.lookupSegment)
    guardedTransport.lookupSegment = (segment, timeoutMs) => call('lookupSegment', () => transport.lookupSegment!(segment, timeoutMs));
  if (transport.onNotification) guardedTransport.onNotification = (listener) => transport.onNotification!(listener);
  if (transport.describe) guardedTransport.describe = () => transport.describe!();
  return guardedTransport;
}

function guarded<T>(plugin: string, method: string, run: () => Promise<T>, log: Log, boundMs: number | undefined): Promise<T> {
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
  if (boundMs === undefined) return settled;
  return new Promise<T>((resolve, reject) => {
    const timer = setTimeout(() => {
      log('error', `transport ${plugin} did not settle ${method}() within ${boundMs} ms; the engine goes on without it`);
      reject(new TransferError('TIMEOUT', `transport ${plugin} did not settle ${method}() within ${boundMs} ms`, { plugin }));
    }, boundMs);
    settled.then(
      (value) => (clearTimeout(timer), resolve(value)),
      (error: unknown) => (clearTimeout(timer), reject(error)),
    );
  });
}

function asTransferError(plugin: string, method: string, error: unknown, how: string): TransferError {
  if (isTransferError(error)) return error;
  return new TransferError('INTERNAL', `transport ${plugin}'s ${method}() ${how} a non-TransferError: ${(error as Error)?.message ?? String(error)}`, {
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
