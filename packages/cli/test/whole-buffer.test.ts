import { test } from 'uvu';
import * as assert from 'uvu/assert';
import { createHash } from 'node:crypto';
import { fillRandom, sha256Of } from '../src/bench/whole-buffer.js';

// The bench fills and hashes its buffers in parts because Node's crypto aborts (randomFillSync)
// or throws (Hash.update) at 4 GiB; the parts are made small here to exercise the same loop.
const PART = 4096;

test('fillRandom fills every part, the short last one included', () => {
  const bytes = new Uint8Array(3 * PART + 100);
  fillRandom(bytes, PART);
  for (let at = 0; at < bytes.length; at += PART) {
    const part = bytes.subarray(at, Math.min(bytes.length, at + PART));
    assert.ok(
      part.some((b) => b !== 0),
      `part at ${at} was not filled`,
    );
  }
  assert.ok(bytes.subarray(3 * PART).some((b) => b !== 0));
});

test('sha256Of in parts is the digest of the whole buffer, and sees a byte flipped in any part', () => {
  const bytes = new Uint8Array(3 * PART + 100);
  fillRandom(bytes);
  const whole = createHash('sha256').update(bytes).digest('hex');
  assert.is(sha256Of(bytes, PART), whole);
  for (const at of [0, PART, 2 * PART + 7, bytes.length - 1]) {
    bytes[at] ^= 1;
    assert.is.not(sha256Of(bytes, PART), whole, `a flipped byte at ${at} went unseen`);
    bytes[at] ^= 1;
  }
});

test.run();
