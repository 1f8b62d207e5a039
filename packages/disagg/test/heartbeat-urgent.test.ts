import { test } from 'uvu';
import * as assert from 'uvu/assert';
import { createTransferEngine } from '@te/connector';
import { pingPeer } from '../src/pd/heartbeat.js';
import { MSG, PD_PROTOCOL_VERSION } from '../src/protocol/messages.js';
import { TCP_CONFIG } from './pd-harness.js';

// What a decode holds for long: staging allocations waiting for ring space, as many as a
// client keeps in flight. A beat must get past them, else the prefill looks dead.
const HELD = 1_024;

test('a liveness ping gets past the requests a peer holds for long: the peer is alive, not a missed beat', async () => {
  const pinger = await createTransferEngine(TCP_CONFIG);
  const peer = await createTransferEngine(TCP_CONFIG);
  const held: (() => void)[] = [];
  const waiters: { n: number; resolve: () => void }[] = [];
  const whenHeld = (n: number): Promise<void> => (held.length >= n ? Promise.resolve() : new Promise((resolve) => waiters.push({ n, resolve })));
  const unhandle = [
    peer.control.handle(
      'test.hold',
      () =>
        new Promise<string>((r) => {
          held.push(() => r('done'));
          for (const w of waiters) if (held.length >= w.n) w.resolve();
        }),
    ),
    peer.control.handle(MSG.ping, () => ({ v: PD_PROTOCOL_VERSION })),
  ];
  try {
    const client = pinger.controlClient(peer.segmentName);
    const holds = Array.from({ length: HELD }, () =>
      client.request('test.hold', null, 30_000).then(
        (v) => v,
        (e: unknown) => String(e),
      ),
    );
    await whenHeld(HELD);
    assert.is(await pingPeer(pinger, peer.segmentName, MSG.ping, 1_000), 'alive');
    for (const release of held) release();
    assert.equal([...new Set(await Promise.all(holds))], ['done']);
  } finally {
    for (const u of unhandle) u();
    await pinger.close();
    await peer.close();
  }
});

test.run();
