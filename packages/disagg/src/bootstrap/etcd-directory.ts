import { TransferError, isTransferError, type MetadataRecords } from '@te/connector';
import type { DecodeDescription, RankDirectory } from './directory.js';
import { HttpError, RankTable, rankKey } from './rank-table.js';
import type { PrefillInfo, RankEndpoint, RankRegistration } from './schema.js';

const RETRY_MS = 100;

/**
 * A prefill instance's rank table kept in the cluster store (etcd) instead of a bootstrap
 * server: each rank writes its registration under `pd/<instance>/<dp>/<tp>/<pp>` (alive as
 * long as the rank's process: the engine's lease), and a decode reads the instance's
 * records and applies the same rules as the server (RankTable). The instance is named by
 * the bootstrap address decode ranks are given, so routers and request parameters stay as
 * they are.
 */
export class EtcdRankDirectory implements RankDirectory {
  private info: Promise<PrefillInfo> | undefined;
  private readonly endpoints = new Map<string, Promise<RankEndpoint>>();

  constructor(
    readonly address: string,
    private readonly records: MetadataRecords,
  ) {}

  private get prefix(): string {
    return `pd/${this.address}/`;
  }

  /** The instance's table as the store holds it now. */
  private async table(timeoutMs: number): Promise<RankTable> {
    const records = await this.records.list(this.prefix, timeoutMs);
    const table = new RankTable();
    for (const [key, value] of [...records].sort(([a], [b]) => a.localeCompare(b))) {
      let body: unknown;
      try {
        body = JSON.parse(Buffer.from(value).toString('utf8'));
      } catch {
        throw new TransferError('BAD_FRAME', `record ${key} of prefill instance ${this.address} is not JSON`);
      }
      table.register(body);
    }
    return table;
  }

  /** Retries what may still succeed (not ready, store away) until the deadline; a layout conflict fails at once. */
  private async retrying<T>(what: string, timeoutMs: number, attempt: (left: number) => Promise<T>): Promise<T> {
    const deadline = Date.now() + timeoutMs;
    let last = 'no answer';
    for (;;) {
      const left = deadline - Date.now();
      if (left <= 0)
        throw new TransferError('TIMEOUT', `prefill instance ${this.address} in the cluster store: ${what} did not succeed in time (last: ${last})`, {
          details: { bootstrap: this.address },
        });
      try {
        return await attempt(left);
      } catch (e) {
        if (e instanceof HttpError) {
          if (e.status === 409) throw new TransferError('LAYOUT_MISMATCH', `prefill instance ${this.address}: ${e.message}`);
          if (e.status === 400) throw new TransferError('INVALID_ARGUMENT', `prefill instance ${this.address}: ${e.message}`);
          last = e.message;
        } else if (isTransferError(e) && e.code === 'PEER_UNREACHABLE') {
          last = e.message;
        } else {
          throw e;
        }
      }
      await new Promise((r) => setTimeout(r, Math.min(RETRY_MS, Math.max(1, deadline - Date.now()))));
    }
  }

  async register(registration: RankRegistration, timeoutMs: number): Promise<void> {
    await this.retrying('rank registration', timeoutMs, async (left) => {
      // The same rules as the server: a rank that contradicts the ones already there is refused.
      const table = await this.table(left);
      table.register(registration);
      await this.records.put(`${this.prefix}${rankKey(registration)}`, Buffer.from(JSON.stringify(registration)));
    });
  }

  async ensureRegistered(registration: RankRegistration, timeoutMs: number): Promise<void> {
    const records = await this.records.list(this.prefix, timeoutMs);
    const mine = records.get(`${this.prefix}${rankKey(registration)}`);
    if (mine && endpointOf(mine) === registration.endpoint) return;
    // Absent, another endpoint's or unreadable: written again (a record that is not JSON, this
    // rank's or another's, then fails the registration with BAD_FRAME naming it).
    await this.register(registration, timeoutMs);
  }

  prefillInfo(decode: DecodeDescription, timeoutMs: number): Promise<PrefillInfo> {
    if (!this.info) {
      const mine = decode as unknown as Record<string, string | number>;
      this.info = this.retrying('layout query', timeoutMs, async (left) =>
        (await this.table(left)).info((field) => (field in mine ? String(mine[field]) : null)),
      );
      this.info.catch(() => (this.info = undefined));
    }
    return this.info;
  }

  async layout(timeoutMs: number): Promise<PrefillInfo> {
    try {
      return (await this.table(timeoutMs)).info(() => null);
    } catch (e) {
      throw e instanceof HttpError ? new TransferError('PEER_UNREACHABLE', `prefill instance ${this.address}: ${e.message}`) : e;
    }
  }

  rankEndpoint(dp: number, tp: number, pp: number, timeoutMs: number): Promise<RankEndpoint> {
    const key = `${dp}/${tp}/${pp}`;
    let p = this.endpoints.get(key);
    if (!p) {
      p = this.retrying(`endpoint query dp=${dp} tp=${tp} pp=${pp}`, timeoutMs, async (left) => (await this.table(left)).endpoint(dp, tp, pp));
      this.endpoints.set(key, p);
      p.catch(() => this.endpoints.delete(key));
    }
    return p;
  }

  forget(): void {
    this.info = undefined;
    this.endpoints.clear();
  }

  async health(timeoutMs: number): Promise<boolean> {
    try {
      return (await this.records.list(this.prefix, timeoutMs)).size > 0;
    } catch {
      return false;
    }
  }
}

/** The `endpoint` of a stored registration; undefined when the record is not JSON or has none. */
function endpointOf(record: Uint8Array): unknown {
  try {
    const body: unknown = JSON.parse(Buffer.from(record).toString('utf8'));
    return typeof body === 'object' && body !== null ? (body as { endpoint?: unknown }).endpoint : undefined;
  } catch {
    return undefined;
  }
}
