import { TransferError } from '../errors/transfer-error.js';

const HOST = /^(?:\[[0-9A-Fa-f:.%\w]+\]|[A-Za-z0-9](?:[A-Za-z0-9.-]{0,252}[A-Za-z0-9])?)$/;

/**
 * A segment name is its control endpoint, `host:port` (`[v6]:port` for IPv6). Checked
 * before anything is done with it, so a bad name is INVALID_ARGUMENT naming the value, not
 * an error from deep inside the socket library.
 */
export function checkSegmentName(segment: unknown): string {
  if (typeof segment !== 'string' || segment === '') throw new TransferError('INVALID_ARGUMENT', `Expected a segment name (host:port), got ${shown(segment)}`);
  const colon = segment.lastIndexOf(':');
  const host = segment.slice(0, colon);
  const port = segment.slice(colon + 1);
  if (colon <= 0 || !HOST.test(host) || (host.includes(':') && !host.startsWith('['))) {
    throw new TransferError('INVALID_ARGUMENT', `Expected a segment name host:port (IPv6 as [addr]:port), got ${shown(segment)}`);
  }
  if (!/^\d{1,5}$/.test(port) || Number(port) < 1 || Number(port) > 65535)
    throw new TransferError('INVALID_ARGUMENT', `Segment name ${shown(segment)} has no valid port (1-65535)`);
  return segment;
}

/** The name as an error message shows it; built only when one is thrown (every batch checks its segment's name). */
function shown(segment: unknown): string {
  return typeof segment === 'string' ? JSON.stringify(segment.slice(0, 80)) : typeof segment;
}
