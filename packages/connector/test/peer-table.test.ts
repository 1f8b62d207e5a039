import { test } from 'uvu';
import * as assert from 'uvu/assert';
import { PeerTable, type PeerState } from '../src/engine/peer-table.js';
import type { EngineTransport } from '../src/engine/router.js';
import type { SegmentDescriptor } from '../src/spi/descriptor.js';

/*
 * The engine's peer table is keyed by segment names that may come from peers (bootstrap
 * messages, KV requests): it is bounded like the control clients, and an evicted peer's
 * transport connections are closed, never while a batch to it is in flight.
 */
function fakeTransport(): { via: EngineTransport; opened: string[]; closed: string[] } {
  const opened: string[] = [];
  const closed: string[] = [];
  const transport = {
    openPeer: async (d: SegmentDescriptor) => (opened.push(d.name), { name: d.name }),
    closePeer: async (p: { name: string }) => void closed.push(p.name),
  };
  return { via: { name: 'fake', plugin: {} as never, transport: transport as never }, opened, closed };
}

const descriptor = (name: string): SegmentDescriptor => ({ version: 1, name, epoch: 1n, hostname: 'h', pid: 1, transports: {}, buffers: [] });
const settle = (): Promise<void> => new Promise((r) => setTimeout(r, 10));
const seg = (i: number): string => `127.0.0.1:${40000 + i}`;

async function use(table: PeerTable, via: EngineTransport, segment: string): Promise<PeerState> {
  const s = await table.state(segment);
  await table.open(s, via);
  return s;
}

test('the peer table keeps at most maxPeers: least recently used idle peers go, their connections closed once', async () => {
  const { via, opened, closed } = fakeTransport();
  let lookups = 0;
  const table = new PeerTable([via], async (s) => (lookups++, descriptor(s)), 8, 60_000);
  const first = await use(table, via, seg(1));
  for (let i = 2; i <= 40; i++) await use(table, via, seg(i));
  await settle();
  assert.ok(table.size <= 8, `${table.size} peers kept for 40 segments`);
  assert.is(opened.length, 40);
  assert.is(closed.length, 40 - table.size, 'every evicted peer had its connection closed');
  assert.is(new Set(closed).size, closed.length, 'each closed once');
  assert.ok(closed.includes(seg(1)), 'the least recently used went first');
  assert.not.ok(closed.includes(seg(40)));
  assert.is(table.known(seg(1)), undefined);
  // Looked up again on next use, as a new state.
  const again = await table.state(seg(1));
  assert.is.not(again, first);
  assert.is(lookups, 41);
  assert.is(await table.state(seg(1)), again, 'a kept peer is reused');
});

test('recency decides eviction: a peer used again outlives newer ones, however often the newest is used', async () => {
  const { via, closed } = fakeTransport();
  const table = new PeerTable([via], async (s) => descriptor(s), 3, 60_000);
  for (const i of [1, 2, 3]) await use(table, via, seg(i));
  // seg(1) used again (twice: the second use finds it newest already), then seg(3), the newest.
  assert.ok(table.lookedUp(seg(1)));
  assert.ok(table.lookedUp(seg(1)));
  await use(table, via, seg(4)); // evicts the least recently used: seg(2)
  await settle();
  assert.equal(closed, [seg(2)]);
  // The newest dropped from the table: using another peer still moves it behind the rest.
  await table.forget(seg(4));
  assert.ok(table.lookedUp(seg(3)));
  await use(table, via, seg(5));
  await use(table, via, seg(6)); // seg(1) is now the least recently used
  await settle();
  assert.equal(closed, [seg(2), seg(4), seg(1)]);
  assert.ok(table.lookedUp(seg(3)), 'the peer used after the forget was kept');
});

test('idle peers expire when the table next changes', async () => {
  const { via, closed } = fakeTransport();
  const table = new PeerTable([via], async (s) => descriptor(s), 1024, 50);
  await use(table, via, seg(1));
  await use(table, via, seg(2));
  await new Promise((r) => setTimeout(r, 120));
  await use(table, via, seg(3));
  await settle();
  assert.equal(closed.sort(), [seg(1), seg(2)]);
  assert.equal(table.segments(), [seg(3)]);
});

// Long enough that no pause of a loaded machine makes a peer just used look idle.
const IDLE_MS = 300;

test('a peer with a batch in flight or a lookup pending is never evicted; idle once released', async () => {
  const { via, closed } = fakeTransport();
  let hang: (d: SegmentDescriptor) => void = () => undefined;
  const table = new PeerTable([via], (s) => (s === seg(99) ? new Promise<SegmentDescriptor>((r) => (hang = r)) : Promise.resolve(descriptor(s))), 2, IDLE_MS);
  const busy = await use(table, via, seg(1));
  table.acquire(busy);
  const pending = table.state(seg(99));
  await new Promise((r) => setTimeout(r, 2 * IDLE_MS)); // past idleMs
  for (let i = 2; i <= 10; i++) await use(table, via, seg(i));
  await settle();
  assert.ok(table.known(seg(1)), 'the peer in use stayed');
  assert.ok(table.known(seg(99)), 'the peer being looked up stayed');
  assert.not.ok(closed.includes(seg(1)), 'its connection was not closed under the batch');
  hang(descriptor(seg(99)));
  await pending;
  table.release(busy); // the idle clock starts now
  await use(table, via, seg(11));
  await settle();
  assert.ok(table.known(seg(1)), 'the release counts as a use: less recently used peers went first');
  await new Promise((r) => setTimeout(r, 2 * IDLE_MS));
  await use(table, via, seg(12));
  await settle();
  assert.is(table.known(seg(1)), undefined, 'idle after release: evicted');
  assert.ok(closed.includes(seg(1)));
  assert.ok(table.size <= 2, `${table.size}`);
});

test('a connection opened on a peer evicted between its lookup and its batch is closed when the batch settles', async () => {
  const { via, closed } = fakeTransport();
  const table = new PeerTable([via], async (s) => descriptor(s), 1, 60_000);
  const late = await table.state(seg(1)); // a transfer got the state...
  await use(table, via, seg(2)); // ...and the peer was evicted before it acquired it
  assert.is(table.known(seg(1)), undefined);
  table.acquire(late);
  await table.open(late, via);
  await settle();
  assert.not.ok(closed.includes(seg(1)), 'not closed under the batch');
  table.release(late);
  await settle();
  assert.ok(closed.includes(seg(1)), 'closed once the batch settled, not leaked');
});

// A batch to a peer already looked up and connected takes its state and transport peer
// synchronously (no promise, no timer); anything not yet, or no longer, good goes the long way.
test('a looked-up peer and its opened connection are handed out at once; pending, failed or dropped ones are not', async () => {
  const { via } = fakeTransport();
  let failOpen = false;
  let holdOpen: ((p: { name: string }) => void) | undefined;
  (via.transport as { openPeer: unknown }).openPeer = (d: SegmentDescriptor) =>
    failOpen ? Promise.reject(new Error('refused')) : holdOpen === undefined ? Promise.resolve({ name: d.name }) : new Promise((r) => (holdOpen = r));
  const table = new PeerTable([via], async (s) => descriptor(s), 8, 60_000);
  assert.is(table.lookedUp(seg(1)), undefined, 'never looked up');
  const looking = table.state(seg(1));
  assert.is(table.lookedUp(seg(1)), undefined, 'lookup pending');
  const s = await looking;
  assert.is(table.lookedUp(seg(1)), s);

  failOpen = true;
  await table.open(s, via).catch(() => undefined);
  await settle();
  assert.is(table.openedPeer(s, via), undefined, 'a failed open is not handed out');
  failOpen = false;
  holdOpen = () => undefined; // the next open stays pending until released
  const opening = table.open(s, via);
  assert.is(table.openedPeer(s, via), undefined, 'an open in progress is not handed out');
  holdOpen({ name: seg(1) });
  const peer = await opening;
  await settle();
  assert.is(table.openedPeer(s, via), peer, 'the opened peer, without waiting');
  assert.is(table.open(s, via), opening, 'one open per state');

  await table.forget(seg(1));
  assert.is(table.lookedUp(seg(1)), undefined, 'a forgotten peer is looked up again');
  assert.is(table.openedPeer(s, via), undefined, "a forgotten peer's closed connection is not handed out");
});

test.run();
