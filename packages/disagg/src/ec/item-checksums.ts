import { ChecksumList, addressOf } from '@te/staging';
import { runChecksums } from '../pd/kv-checksum.js';

/** The CRC32C of each host view (an EC item as stored or as landed), on the checksummer's threads. */
export function crc32cOfViews(views: readonly Uint8Array[]): Promise<Uint32Array> {
  const list = new ChecksumList(views.length);
  const regions = views.map((v) => ({ addr: Number(addressOf(v)), length: v.length }));
  for (const r of regions) list.push(r.addr, r.length);
  return runChecksums(regions, list);
}
