// congestionControl (TE_TCP_CONGESTION): every data socket, both ends, gets the algorithm
// asked for; a name the kernel refuses fails the start with INVALID_ARGUMENT and the
// kernel's reason, and a malformed one is INVALID_CONFIG before any socket is made.
import { test } from 'uvu';
import * as assert from 'uvu/assert';
import { spawnSync } from 'node:child_process';
import { readFileSync } from 'node:fs';
import { batchOf, parseOptions, TransferError } from '@te/connector';
import plugin from '../src/index.js';
import { hash, localTransport, MiB, pattern, spawnTarget } from './helpers.js';

const read = (path: string) => {
  try {
    return readFileSync(path, 'utf8').trim();
  } catch {
    return undefined;
  }
};
const available = read('/proc/sys/net/ipv4/tcp_available_congestion_control')?.split(/\s+/) ?? [];
const systemDefault = read('/proc/sys/net/ipv4/tcp_congestion_control');
// An algorithm other than the system's, so that the sockets show the option's effect.
const other = available.find((a) => a !== systemDefault);
const noOther = other ? undefined : `the kernel offers no congestion control besides ${systemDefault ?? 'its default'}`;
const ss = spawnSync('ss', ['-V'], { encoding: 'utf8' });
const noSs = ss.error ? 'ss (iproute2) is not installed: apt-get install -y iproute2' : undefined;

const SIZE = 4 * MiB;

const effectName = `the target's and the initiator's data sockets use the algorithm asked for, and bytes land`;
const effect = async () => {
  const target = await spawnTarget(SIZE, { congestionControl: other });
  const local = await localTransport(SIZE, { congestionControl: other });
  try {
    assert.is(local.transport.describe?.().congestionControl, other);
    const data = pattern(7, SIZE);
    local.buffer.set(data);
    const peer = await local.transport.openPeer(target.descriptor);
    const w = await local.transport.submit(peer, batchOf([{ op: 'write', local: local.addr, remote: BigInt(target.info.addr), length: SIZE }]), {
      timeoutMs: 20000,
    });
    assert.equal(Array.from(w.statuses), [0]);
    assert.is(await target.call('hash', { offset: 0, length: SIZE }), hash(data));
    // Each connection to the target's port, as the kernel reports it (both ends are on loopback).
    const port = (target.info.endpoint as { port: number }).port;
    const out = spawnSync('ss', ['-tinH', 'state', 'established', `( sport = :${port} or dport = :${port} )`], { encoding: 'utf8' }).stdout;
    const sockets = out
      .split('\n')
      .filter((l) => /\b(cubic|reno|bbr|htcp|vegas|westwood|dctcp|bic|illinois|scalable|hybla|highspeed|lp|veno|yeah|nv|cdg)\b/.test(l));
    assert.ok(sockets.length >= 2, `both ends of at least one connection are listed:\n${out}`);
    for (const line of sockets) assert.match(line, new RegExp(`\\b${other}\\b`), `a data socket with another algorithm:\n${line}`);
  } finally {
    await local.transport.close();
    await target.call('exit').catch(() => {});
  }
};
const skipReason = noOther ?? noSs;
if (skipReason) test.skip(`${effectName} — skipped: ${skipReason}`, effect);
else test(effectName, effect);

test('a name the kernel does not have fails the start with INVALID_ARGUMENT and says where to look', async () => {
  try {
    const local = await localTransport(MiB, { congestionControl: 'nosuchcc' });
    await local.transport.close();
    assert.unreachable('the transport started');
  } catch (e) {
    assert.instance(e, TransferError);
    assert.is((e as TransferError).code, 'INVALID_ARGUMENT');
    assert.match((e as Error).message, /congestionControl 'nosuchcc' was refused by the kernel/);
    assert.match((e as Error).message, /tcp_available_congestion_control/);
  }
});

test('a malformed name is refused by the options, from config and from TE_TCP_CONGESTION', () => {
  for (const [config, env] of [
    [{ congestionControl: 'cu bic' }, {}],
    [{ congestionControl: '' }, {}],
    [{ congestionControl: 'a'.repeat(16) }, {}],
    [{}, { TE_TCP_CONGESTION: 'bbr;reno' }],
  ] as const) {
    assert.throws(
      () => parseOptions(plugin.options, config, env, plugin.name),
      (e: unknown) => e instanceof TransferError && e.code === 'INVALID_CONFIG' && /congestionControl|TE_TCP_CONGESTION/.test(e.message),
      JSON.stringify({ config, env }),
    );
  }
  assert.is(parseOptions(plugin.options, {}, { TE_TCP_CONGESTION: 'reno' }, plugin.name).congestionControl, 'reno');
  assert.is(parseOptions(plugin.options, {}, {}, plugin.name).congestionControl, undefined);
});

test.run();
