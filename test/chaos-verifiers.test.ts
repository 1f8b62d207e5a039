import { test } from 'uvu';
import * as assert from 'uvu/assert';
// @ts-expect-error: a plain .mjs module of the chaos soak, without types
import { fillSeeded, pageSeed, prng, wrongBytes } from '../scripts/chaos/pattern.mjs';
// @ts-expect-error: a plain .mjs module of the chaos soak, without types
import { judgeRoom } from '../scripts/chaos/judge.mjs';

/*
 * The chaos soak (scripts/chaos.mjs) passes only when its checks find nothing, so each
 * check is shown here finding what it exists for: a flipped byte, a page of another room,
 * buffer or head shard, a room that did not end, a failure without its room, and the two
 * sides of a room ending apart.
 */
const ok = { status: 4, ms: 5, wrong: 0 };
const names = { pNames: ['p.tp0', 'p.tp1'], dNames: ['d.tp0', 'd.tp1'], roomEndMs: 1000 };

test('a page check finds one flipped bit, and a page of another room, buffer, place or head shard', () => {
  const page = new Uint8Array(2048);
  const seed = pageSeed(0x1234_5678_9abcn, 3, 7, 1);
  fillSeeded(page, seed);
  assert.is(wrongBytes(page, seed), 0);
  page[1500]! ^= 0x10;
  assert.is(wrongBytes(page, seed), 1);
  for (const other of [
    pageSeed(0x1234_5678_9abdn, 3, 7, 1),
    pageSeed(0x1234_5678_9abcn, 4, 7, 1),
    pageSeed(0x1234_5678_9abcn, 3, 8, 1),
    pageSeed(0x1234_5678_9abcn, 3, 7, 0),
    pageSeed(0x1234_5678_9abcn + (1n << 40n), 3, 7, 1),
  ]) {
    const wrong = new Uint8Array(2048);
    fillSeeded(wrong, other);
    assert.ok(wrongBytes(wrong, seed) > 1900, 'a page of another room, buffer, place or shard is caught on nearly every byte');
  }
});

test('the schedule is a function of the seed', () => {
  const a = prng(7);
  const b = prng(7);
  const c = prng(8);
  const xs = Array.from({ length: 20 }, () => a.u63());
  assert.equal(
    Array.from({ length: 20 }, () => b.u63()),
    xs,
  );
  assert.not.equal(
    Array.from({ length: 20 }, () => c.u63()),
    xs,
  );
  assert.ok(xs.every((x: bigint) => x >= 0n && x < 1n << 63n));
});

test('a room judged clean passes, and each broken invariant is named', () => {
  const clean = judgeRoom({ key: '5', ...names, ps: [ok, ok], ds: [ok, ok] });
  assert.equal(clean.violations, []);
  assert.ok(clean.succeeded);

  const wrong = judgeRoom({ key: '5', ...names, ps: [ok, ok], ds: [ok, { ...ok, wrong: 1 }] });
  assert.is(wrong.wrongBytes, 1);
  assert.match(wrong.violations.join('\n'), /1 wrong bytes on d.tp1 after Success/);

  const hung = judgeRoom({ key: '5', ...names, ps: [ok, { status: 3, ms: 1000 }], ds: [ok, ok] });
  assert.match(hung.violations.join('\n'), /did not end on p.tp1/);

  const anonymous = judgeRoom({ key: '5', ...names, ps: [ok, ok], ds: [{ status: 0, code: 'TIMEOUT', message: 'x' }, ok] });
  assert.match(anonymous.violations.join('\n'), /failure on d.tp0 without details.room/);
  assert.is(anonymous.cause, 'TIMEOUT');

  const apart = judgeRoom({ key: '5', ...names, ps: [ok, { status: 0, code: 'ABORTED', message: 'x', room: '5' }], ds: [ok, ok] });
  assert.match(apart.violations.join('\n'), /d.tp1 Success but p.tp1 Failed/);
  const apart2 = judgeRoom({ key: '5', ...names, ps: [ok, ok], ds: [{ status: 0, code: 'PEER_FAILED', message: 'x', room: '5' }, ok] });
  assert.match(apart2.violations.join('\n'), /p.tp0 Success but d.tp0 Failed/);

  // The documented exceptions are counted, not passed over: an undeliverable Success report,
  // and the decode's own abort after the prefill finished.
  const undelivered = judgeRoom({
    key: '5',
    ...names,
    ps: [{ status: 0, code: 'PEER_FAILED', message: 'room 5: the KV landed but the result could not be delivered: x', room: '5' }, ok],
    ds: [ok, ok],
  });
  assert.equal(undelivered.violations, []);
  assert.is(undelivered.successUndelivered, 1);
  const late = judgeRoom({ key: '5', ...names, abortSide: 'decode', ps: [ok, ok], ds: [{ status: 0, code: 'ABORTED', message: 'x', room: '5' }, ok] });
  assert.equal(late.violations, []);
  assert.is(late.abortedAfterPrefillSuccess, 1);

  const corrupted = judgeRoom({
    key: '5',
    ...names,
    ps: [{ status: 0, code: 'DATA_CORRUPTED', message: 'x', room: '5' }, ok],
    ds: [{ status: 0, code: 'DATA_CORRUPTED', message: 'x', room: '5' }, ok],
  });
  assert.match(corrupted.violations.join('\n'), /DATA_CORRUPTED on d.tp0/);

  const killed = judgeRoom({ key: '5', ...names, ps: [ok, ok], ds: [ok, undefined] });
  assert.equal(killed.violations, []);
  assert.not.ok(killed.succeeded);
  assert.is(killed.cause, 'RANK_KILLED');
});

test.run();
