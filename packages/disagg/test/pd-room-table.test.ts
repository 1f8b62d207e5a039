import { test } from 'uvu';
import * as assert from 'uvu/assert';
import { TransferError, isTransferError } from '@te/connector';
import type { Destination } from '../src/pd/destination.js';
import type { PrefillSender } from '../src/pd/kv-sender.js';
import { PrefillRoomTable } from '../src/pd/prefill-rooms.js';
import type { RoomRequest } from '../src/pd/room-context.js';

/*
 * The prefill rank's room table on its own: each room in one state (waiting, live, refused,
 * finished), the moves between them, the sweep. The senders are fakes that record what the
 * table did to them; the rooms' transfers are tested end to end in the pd-* suites.
 */

/** What a fake sender records: the requests it was given, the error it failed with, the decodes a write may still land in. */
interface FakeSender {
  room: bigint;
  given: RoomRequest[];
  failedWith: TransferError | undefined;
  unconfirmed: Set<string>;
}

/** A fake sender, typed as the sender the table holds. */
function fakeSender(room: bigint): PrefillSender {
  const s: FakeSender = { room, given: [], failedWith: undefined, unconfirmed: new Set() };
  return Object.assign(s, {
    addRequest: (rr: RoomRequest) => void s.given.push(rr),
    fail: (e: TransferError) => void (s.failedWith ??= e),
    pagesMayBeWritten: () => s.unconfirmed,
    destinations: () => s.given.map((r) => r.dest),
  }) as unknown as PrefillSender;
}

/** What the fake recorded. */
const seen = (s: PrefillSender): FakeSender => s as unknown as FakeSender;

const request = (segment: string): RoomRequest => ({ req: {} as RoomRequest['req'], dest: { segment } as Destination });

test('requests that come before the sender wait, and the sender gets them in order', () => {
  const t = new PrefillRoomTable();
  t.request(1n, request('d0'));
  t.request(1n, request('d1'));
  assert.is(t.get(1n)?.state, 'waiting');
  assert.equal(
    [...t.waitingRequests()].map((r) => r.dest.segment),
    ['d0', 'd1'],
  );
  const s = seen(t.open(1n, () => fakeSender(1n)));
  assert.is(t.get(1n)?.state, 'live');
  assert.equal(
    s.given.map((r) => r.dest.segment),
    ['d0', 'd1'],
  );
  assert.equal([...t.waitingRequests()], []);
  t.request(1n, request('d2'));
  assert.equal(
    s.given.map((r) => r.dest.segment),
    ['d0', 'd1', 'd2'],
  );
});

test('a room refused before its sender exists: requests get the refusal, the sender fails when created and the room is gone', () => {
  const t = new PrefillRoomTable();
  t.request(2n, request('d0'));
  const why = new TransferError('LAYOUT_MISMATCH', 'room 2: page_size mismatch', { details: { room: 2n } });
  t.refuse(2n, why);
  assert.is(t.get(2n)?.state, 'refused');
  assert.is(t.refusal(2n), why);
  assert.throws(
    () => t.request(2n, request('d1')),
    (e: unknown) => e === why,
  );
  const s = seen(t.open(2n, () => fakeSender(2n)));
  assert.is(s.failedWith, why);
  assert.equal(s.given, []);
  assert.is(t.get(2n), undefined);
});

test('refusing a live room fails its sender', () => {
  const t = new PrefillRoomTable();
  const s = seen(t.open(3n, () => fakeSender(3n)));
  const why = new TransferError('ABORTED', 'room 3: aborted by the decode');
  t.refuse(3n, why);
  assert.is(s.failedWith, why);
  assert.is(t.get(3n)?.state, 'live');
});

test('a second sender for a live room is refused with INVALID_ARGUMENT', () => {
  const t = new PrefillRoomTable();
  t.open(4n, () => fakeSender(4n));
  assert.throws(
    () => t.open(4n, () => fakeSender(4n)),
    (e: unknown) => isTransferError(e, 'INVALID_ARGUMENT') && /room 4 already has a sender/.test(e.message),
  );
});

test('a sender that ends is gone, unless a write may still land: then the room is finished and names those decodes', () => {
  const t = new PrefillRoomTable();
  const clean = t.open(5n, () => fakeSender(5n));
  t.ended(clean);
  assert.is(t.get(5n), undefined);
  const unsure = t.open(6n, () => fakeSender(6n));
  seen(unsure).unconfirmed.add('d0');
  t.ended(unsure);
  const room = t.get(6n);
  assert.is(room?.state, 'finished');
  assert.ok(room?.state === 'finished' && room.segments.has('d0'));
  assert.equal(t.senders(), []);
});

test('an old sender ending does not touch the live sender that replaced it', () => {
  const t = new PrefillRoomTable();
  const refused = fakeSender(7n);
  t.refuse(7n, new TransferError('ABORTED', 'room 7: aborted'));
  t.open(7n, () => refused);
  const live = t.open(7n, () => fakeSender(7n));
  seen(refused).unconfirmed.add('d0');
  t.ended(refused);
  assert.is(t.sender(7n), live);
});

test('the sweep forgets waiting, refused and finished rooms older than the horizon, never a live one', async () => {
  const t = new PrefillRoomTable();
  t.request(8n, request('d0'));
  t.refuse(9n, new TransferError('ABORTED', 'room 9: aborted'));
  const unsure = t.open(10n, () => fakeSender(10n));
  seen(unsure).unconfirmed.add('d0');
  t.ended(unsure);
  const live = t.open(11n, () => fakeSender(11n));
  t.sweep(Date.now() - 60_000);
  assert.equal(
    [8n, 9n, 10n, 11n].map((r) => t.get(r)?.state),
    ['waiting', 'refused', 'finished', 'live'],
  );
  await new Promise((r) => setTimeout(r, 5));
  t.sweep(Date.now());
  assert.equal(
    [8n, 9n, 10n].map((r) => t.get(r)),
    [undefined, undefined, undefined],
  );
  assert.is(t.sender(11n), live);
});

test('one room takes at most 4096 waiting requests', () => {
  const t = new PrefillRoomTable();
  for (let i = 0; i < 4096; i++) t.request(12n, request(`d${i}`));
  assert.throws(
    () => t.request(12n, request('one more')),
    (e: unknown) => isTransferError(e, 'INVALID_ARGUMENT') && /too many requests/.test(e.message),
  );
});

test.run();
