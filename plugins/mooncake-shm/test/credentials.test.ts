import { test } from 'uvu';
import * as assert from 'uvu/assert';
import { spawnSync } from 'node:child_process';
import { fileURLToPath } from 'node:url';
import { createEndpoint, register } from './helpers.js';

/*
 * A same-host transport trusts the kernel's record of who connected (SO_PEERCRED): a
 * process of another user is refused before any request is read. The child drops to
 * `nobody` with process.setuid, then uses the plugin like any initiator would.
 */
const name = 'a connection from another uid is refused (AUTH_FAILED at the initiator), and the target logs the refusal';
const coreName = 'core: a raw client of another uid gets AUTH_FAILED from the target itself, and its HELLO and WRITE change nothing';
const fixture = fileURLToPath(new URL('./fixtures/other-user.ts', import.meta.url));
const coreScript = fileURLToPath(new URL('../scripts/native-test.sh', import.meta.url));
const root = process.getuid?.() === 0;
const notRoot = 'switching the child to nobody needs root';

async function refusedAcrossUsers(): Promise<void> {
  const target = await createEndpoint('credentials-target');
  await register(target.transport, new Uint8Array(4096));
  try {
    const env = {
      ...process.env,
      TE_SHM_TEST_TARGET: JSON.stringify({ name: target.name, epoch: target.epoch.toString(), endpoint: target.transport.endpoint() }),
    };
    // spawnSync would block this process's event loop, which is fine: the target's accept runs on its own thread.
    const r = spawnSync(process.execPath, ['--import', 'tsx', fixture], {
      env,
      encoding: 'utf8',
      timeout: 20_000,
      cwd: fileURLToPath(new URL('..', import.meta.url)),
    });
    assert.is(r.status, 0, r.stderr);
    const out = JSON.parse(r.stdout.trim().split('\n').pop()!) as { uid: number; code: string; message?: string };
    assert.is.not(out.uid, 0);
    assert.is(out.code, 'AUTH_FAILED', out.message);
    // Both ends refuse (the initiator checks the listener's uid too), so the initiator's code
    // alone cannot show that the target refused: the core case below does, with a raw client
    // that skips the initiator's check. Here, secondary: the target logs the refusal naming the
    // uid (docs/plugins/mooncake-shm.md: "the target logs it").
    const deadline = Date.now() + 2_000;
    while (!target.warnings.some((w) => w.includes(`uid ${out.uid} refused`)) && Date.now() < deadline) await new Promise((res) => setTimeout(res, 10));
    assert.ok(
      target.warnings.some((w) => w.includes(`uid ${out.uid} refused`)),
      target.warnings.join('\n'),
    );
  } finally {
    await target.transport.close();
  }
}

/**
 * The C++ core's other-uid case (test/native/shm_core_test.cpp, test_other_uid), alone: a
 * nobody child connects with no initiator-side check, must get the target's HELLO reply
 * AUTH_FAILED and end of stream, and a HELLO plus a WRITE it sends must leave the target's
 * memory unchanged. Exit 0: passed; 77: skipped (not root); anything else: failed.
 */
function coreRefusesOtherUid(): void {
  const r = spawnSync('sh', [coreScript, 'other-uid'], { encoding: 'utf8', timeout: 300_000 });
  assert.is(r.status, 0, `native-test.sh other-uid exited ${r.status ?? r.signal}:\n${r.stdout}${r.stderr}`);
}

if (root) {
  test(name, refusedAcrossUsers);
  test(coreName, coreRefusesOtherUid);
} else {
  for (const n of [name, coreName]) {
    console.log(`  skipped "${n}": ${notRoot}`);
    test.skip(`${n} — skipped: ${notRoot}`, () => undefined);
  }
}

test('a same-user peer is admitted (the control case of the test above)', async () => {
  const target = await createEndpoint('credentials-same-user');
  const other = await createEndpoint('credentials-same-user-initiator');
  try {
    const peer = await other.transport.openPeer(target.descriptor());
    await other.transport.closePeer(peer);
    assert.equal(target.warnings, []);
  } finally {
    await other.transport.close();
    await target.transport.close();
  }
});

test.run();
