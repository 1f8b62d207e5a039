// A plugin over the testkit's fake transport (a test tool, in-process) whose writes a test
// can hold or fail: a held batch ignores its deadline and abort until released, then lands
// its bytes, as a transport that cannot recall posted writes does. Writes are picked by
// destination segment (`hold`, `fail`) or by the engine that sends them (`holdFrom`,
// `failFrom`); a failed one fails once a held one is in the transport. Released with
// `unconfirmed`, a held write is given up instead of landing, and says that its bytes may
// still land at the peer, as a transport whose peer did not confirm the cancel does.
import {
  PLUGIN_API_VERSION,
  PluginRegistry,
  TransferError,
  definePlugin,
  type BatchResult,
  type SubmitOptions,
  type TransferBatch,
  type TransportContext,
  type TransportPeer,
} from '@te/connector';
import { FakeFaults, FakeTransport } from '@te/testkit';

export interface Gate {
  hold?: string | undefined;
  fail?: string | undefined;
  holdFrom?: string | undefined;
  failFrom?: string | undefined;
  /** Resolves when a held batch reached the transport (set by `arm`). */
  parked?: Promise<void> | undefined;
  park?: (() => void) | undefined;
  released: ((unconfirmed: boolean) => void)[];
}

export interface GatedPlugin {
  gate: Gate;
  registry: () => PluginRegistry;
  /** Starts a round: `parked` resolves at the next held batch. */
  arm(rules: Pick<Gate, 'hold' | 'fail' | 'holdFrom' | 'failFrom'>): Promise<void>;
  /** Lets every held batch go on; with `unconfirmed`, gives them up instead (see above). */
  releaseAll(options?: { unconfirmed?: boolean }): void;
  /** Releases what is held and clears the rules. */
  reset(): void;
}

export function gatedPlugin(name: string): GatedPlugin {
  const gate: Gate = { released: [] };
  const injected = (what: string) => () => Promise.reject(new TransferError('TRANSFER_FAILED', `injected: ${what} broke`));

  class GatedTransport extends FakeTransport {
    private readonly source: string;

    constructor(context: TransportContext, faults: FakeFaults) {
      super(name, context, faults);
      this.source = context.segmentName;
    }

    override submit(peer: TransportPeer, batch: TransferBatch, options: SubmitOptions): Promise<BatchResult> {
      if (this.source === gate.holdFrom || peer.segment === gate.hold) return this.held(peer, batch, options);
      if (this.source === gate.failFrom) return gate.parked!.then(injected("this rank's link"));
      if (peer.segment === gate.fail) return gate.parked!.then(injected('the link to this peer'));
      return super.submit(peer, batch, options);
    }

    private held(peer: TransportPeer, batch: TransferBatch, options: SubmitOptions): Promise<BatchResult> {
      return new Promise((resolve, reject) => {
        gate.released.push((unconfirmed) => {
          if (!unconfirmed) return void super.submit(peer, batch, { timeoutMs: options.timeoutMs }).then(resolve, reject);
          const code = options.signal?.aborted ? 'ABORTED' : 'TIMEOUT';
          reject(new TransferError(code, 'injected: the peer did not confirm the cancel', { details: { remoteMayBeWritten: true } }));
        });
        gate.park?.();
      });
    }
  }

  const faults = new FakeFaults();
  const plugin = definePlugin({
    apiVersion: PLUGIN_API_VERSION,
    name,
    version: '0.0.0-test',
    capabilities: { class: 'test', memoryKinds: ['cpu'], read: true, notifications: true, maxInFlight: 1024, rawAddresses: false },
    options: {},
    probe: () => ({ available: true, details: {} }),
    create: async (context) => new GatedTransport(context, faults),
  });
  const releaseAll = (options: { unconfirmed?: boolean } = {}): void => {
    for (const release of gate.released.splice(0)) release(options.unconfirmed === true);
  };
  return {
    gate,
    registry: () => {
      const r = new PluginRegistry({ builtins: false });
      r.register(name, plugin);
      return r;
    },
    arm(rules) {
      Object.assign(gate, rules);
      gate.parked = new Promise<void>((r) => (gate.park = r));
      return gate.parked;
    },
    releaseAll,
    reset() {
      releaseAll();
      gate.hold = gate.fail = gate.holdFrom = gate.failFrom = undefined;
    },
  };
}
