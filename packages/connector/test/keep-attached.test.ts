import { MessageChannel } from 'node:worker_threads';
import { test } from 'uvu';
import * as assert from 'uvu/assert';
import { isTransferError } from '../src/errors/transfer-error.js';
import { MARK_IS_SAFE, keepAttached } from '../src/spi/keep-attached.js';

/*
 * A registered buffer's memory must stay with its ArrayBuffer: every way Node.js offers to
 * detach one either refuses or leaves the memory where it was. Node.js 20 has no
 * ArrayBuffer.prototype.transfer and copies a marked buffer named in a transfer list;
 * 22 refuses the transfer list; from 24 on the mark is not used (it crashed processes at
 * exit), so a transfer list detaches there. From 22 on the buffer's own transfer() and
 * transferToFixedLength() throw (ArrayBuffer.prototype.transfer.call() still detaches it).
 */
type Detachable = ArrayBuffer & { transfer?: () => ArrayBuffer; transferToFixedLength?: () => ArrayBuffer; detached?: boolean };

function filled(length: number): Uint8Array {
  const bytes = new Uint8Array(length);
  for (let i = 0; i < length; i++) bytes[i] = (i * 7 + 3) & 0xff;
  return bytes;
}

function assertIntact(bytes: Uint8Array, length: number, how: string): void {
  assert.is(bytes.buffer.byteLength, length, `${how}: the ArrayBuffer kept its memory`);
  assert.is(bytes[length - 1], ((length - 1) * 7 + 3) & 0xff, `${how}: the bytes are still readable`);
}

/** The error `attempt` threw, or undefined when it returned. */
function thrownBy(attempt: () => unknown): unknown {
  try {
    attempt();
    return undefined;
  } catch (e) {
    return e;
  }
}

const LISTS_CASE = 'a kept buffer named in a structuredClone or postMessage transfer list is not detached';
if (!MARK_IS_SAFE) {
  const why = `on Node.js ${process.version} the untransferable mark is a V8 detach key, which crashed processes at exit; keepAttached does not mark, and a transfer list can detach a registered buffer`;
  console.log(`  skipped "${LISTS_CASE}": ${why}`);
  test.skip(`${LISTS_CASE} — skipped: ${why}`, () => undefined);
} else {
  test(LISTS_CASE, () => {
    const bytes = filled(1 << 20);
    keepAttached(bytes);
    const ab = bytes.buffer as Detachable;
    const cloned = thrownBy(() => structuredClone(ab, { transfer: [ab] }));
    if (cloned !== undefined) assert.is((cloned as Error).name, 'DataCloneError', String(cloned));
    assertIntact(bytes, 1 << 20, 'structuredClone');
    const { port1, port2 } = new MessageChannel();
    try {
      const posted = thrownBy(() => port1.postMessage(ab, [ab]));
      if (posted !== undefined) assert.is((posted as Error).name, 'DataCloneError', String(posted));
    } finally {
      port1.close();
      port2.close();
    }
    assertIntact(bytes, 1 << 20, 'postMessage');
  });
}

const TRANSFER_CASE = 'transfer() and transferToFixedLength() of a kept buffer throw and leave it attached';
if (typeof (new ArrayBuffer(1) as Detachable).transfer !== 'function') {
  const why = `Node.js ${process.version} has no ArrayBuffer.prototype.transfer`;
  console.log(`  skipped "${TRANSFER_CASE}": ${why}`);
  test.skip(`${TRANSFER_CASE} — skipped: ${why}`, () => undefined);
} else {
  test(TRANSFER_CASE, () => {
    for (const method of ['transfer', 'transferToFixedLength'] as const) {
      const bytes = filled(4096);
      keepAttached(bytes);
      const ab = bytes.buffer as Detachable;
      const error = thrownBy(() => ab[method]!());
      assert.ok(error !== undefined, `${method}() of a kept buffer returned`);
      assert.ok(isTransferError(error, 'MEMORY_IN_USE'), `${method}(): ${String(error)}`);
      assertIntact(bytes, 4096, method);
    }
  });
}

test('a view keeps its whole ArrayBuffer attached, and a buffer left alone stays detachable', () => {
  const whole = filled(8192);
  keepAttached(whole.subarray(4096, 6000));
  assertIntact(whole, 8192, 'a view over part of it');
  const other = new ArrayBuffer(16) as Detachable;
  structuredClone(other, { transfer: [other] });
  assert.is(other.byteLength, 0, 'an unregistered buffer is detached as before');
});

test('a frozen buffer is kept without an error', () => {
  const bytes = filled(64);
  Object.freeze(bytes.buffer);
  keepAttached(bytes);
  const ab = bytes.buffer as Detachable;
  if (MARK_IS_SAFE) thrownBy(() => structuredClone(ab, { transfer: [ab] }));
  assertIntact(bytes, 64, 'a frozen buffer, kept');
});

test('a SharedArrayBuffer and a buffer kept twice are accepted', () => {
  const shared = new SharedArrayBuffer(64);
  keepAttached(shared);
  keepAttached(new Uint8Array(shared));
  const bytes = filled(64);
  keepAttached(bytes);
  keepAttached(bytes.buffer);
  assertIntact(bytes, 64, 'kept twice');
});

test.run();
