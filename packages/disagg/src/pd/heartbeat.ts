import { isTransferError, type TransferEngine } from '@te/connector';
import type { RankDirectory } from '../bootstrap/directory.js';
import type { RankRegistration } from '../bootstrap/schema.js';
import { PD_PROTOCOL_VERSION } from '../protocol/messages.js';

/**
 * Periodic liveness checks of the peers that have live rooms. A peer missing
 * `maxFailures` consecutive checks (or answering "unreachable" at once) is reported
 * dead once; its rooms are failed by the owner.
 */
export class Heartbeat {
  private readonly failures = new Map<string, number>();
  private timer: NodeJS.Timeout | undefined;
  private running = false;

  constructor(
    private readonly intervalMs: number,
    private readonly maxFailures: number,
    private readonly peers: () => Iterable<string>,
    private readonly check: (peer: string, timeoutMs: number) => Promise<'alive' | 'dead' | 'missed'>,
    private readonly onDead: (peer: string) => void,
  ) {}

  start(): void {
    if (this.timer) return;
    this.timer = setInterval(() => void this.tick(), this.intervalMs);
    this.timer.unref();
  }

  private async tick(): Promise<void> {
    if (this.running) return; // a slow round must not pile up rounds
    this.running = true;
    try {
      const live = new Set(this.peers());
      for (const p of this.failures.keys()) if (!live.has(p)) this.failures.delete(p);
      await Promise.all(
        [...live].map(async (peer) => {
          const r = await this.check(peer, this.intervalMs).catch(() => 'missed' as const);
          if (r === 'alive') return void this.failures.delete(peer);
          const n = r === 'dead' ? this.maxFailures : (this.failures.get(peer) ?? 0) + 1;
          if (n >= this.maxFailures) {
            this.failures.delete(peer);
            this.onDead(peer);
          } else {
            this.failures.set(peer, n);
          }
        }),
      );
    } finally {
      this.running = false;
    }
  }

  stop(): void {
    if (this.timer) clearInterval(this.timer);
    this.timer = undefined;
  }
}

/**
 * One liveness check over the control plane (`type`: the ping message the peer serves): an
 * unreachable peer is dead at once, any other failure is a missed beat.
 */
export async function pingPeer(engine: TransferEngine, segment: string, type: string, timeoutMs: number): Promise<'alive' | 'dead' | 'missed'> {
  try {
    // Urgent: a peer holding many long requests of this rank (staging allocations) still answers.
    await engine.controlClient(segment).request(type, { v: PD_PROTOCOL_VERSION }, timeoutMs, { urgent: true });
    return 'alive';
  } catch (e) {
    return isTransferError(e, 'PEER_UNREACHABLE') ? 'dead' : 'missed';
  }
}

/**
 * A prefill rank's own beat: its registration is checked every `intervalMs` and made again
 * when it is gone. A bootstrap server that restarts (its process, or the rank hosting it)
 * comes back empty, and an etcd record can lapse with a stalled rank's lease; without this
 * the instance would never be ready again. Returns the stop function.
 */
export function keepRegistered(directory: RankDirectory, registration: () => RankRegistration, intervalMs: number): () => void {
  let checking = false;
  const timer = setInterval(() => {
    if (checking) return;
    checking = true;
    directory
      .ensureRegistered(registration(), intervalMs)
      .catch(() => undefined)
      .finally(() => (checking = false));
  }, intervalMs);
  timer.unref();
  return () => clearInterval(timer);
}
