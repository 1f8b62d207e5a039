import { test } from 'uvu';
import * as assert from 'uvu/assert';
import { isTransferError } from '@te/connector';
import { checkReply, matchesReply } from '../src/protocol/handle.js';
import { AbortReplySchema } from '../src/protocol/messages.js';
import { EC_PULL, PullReplySchema } from '../src/ec/messages.js';

/*
 * Replies from a peer are checked before use: one of an older build (without the optional
 * flags) is accepted as it is, a malformed or hostile one is not.
 */
test('an abort answer: flags are read only from a well-formed answer', () => {
  assert.ok(matchesReply(AbortReplySchema, { settled: true, status: 0 }), 'an older build (no flag)');
  assert.ok(matchesReply(AbortReplySchema, { settled: true, status: 0, pagesMayBeWritten: true }));
  for (const bad of [null, 'ok', {}, { settled: false, status: 0 }, { settled: true, status: 9 }, { settled: true, status: 0, pagesMayBeWritten: 'yes' }]) {
    assert.not.ok(matchesReply(AbortReplySchema, bad), JSON.stringify(bad));
  }
});

test('a pull answer whose item flag is not a boolean is refused with PROTOCOL_MISMATCH', () => {
  const good = { results: [{ ok: false, code: 'TIMEOUT', message: 'm', destinationMayBeWritten: true }] };
  assert.equal(checkReply(EC_PULL, PullReplySchema, good), good);
  for (const bad of [{ results: [{ ok: false, destinationMayBeWritten: 'yes' }] }, { results: [{ ok: false, destinationMayBeWritten: null }] }]) {
    try {
      checkReply(EC_PULL, PullReplySchema, bad);
      assert.unreachable(`accepted ${JSON.stringify(bad)}`);
    } catch (e) {
      assert.ok(isTransferError(e, 'PROTOCOL_MISMATCH'), String(e));
    }
  }
});

test.run();
