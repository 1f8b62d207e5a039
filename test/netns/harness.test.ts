import { test } from 'uvu';
import * as assert from 'uvu/assert';
import { fork } from 'node:child_process';
import { readFileSync } from 'node:fs';
import { connect } from 'node:net';
import { fileURLToPath } from 'node:url';
import { compileWorkerScript } from '@te/testkit';
import { Cluster, hostRanges, links, namespaces, netnsSupport, overlaps, parseCidr, sweepDeadRuns, testIf, type Host } from './harness/index.js';

/*
 * The namespace harness itself: separate network stacks joined by one link, addresses the
 * host does not use, and nothing left behind — after close, after SIGTERM, and (removed by
 * the next run) after SIGKILL.
 */
const support = netnsSupport();
const ECHO = fileURLToPath(new URL('./fixtures/echo.ts', import.meta.url));
const DYING = fileURLToPath(new URL('./fixtures/dying-run.ts', import.meta.url));

/** Running (a killed process whose parent died may stay a zombie until PID 1 reaps it). */
const alive = (pid: number): boolean => {
  try {
    const stat = readFileSync(`/proc/${pid}/stat`, 'utf8');
    return stat.slice(stat.lastIndexOf(')') + 2, stat.lastIndexOf(')') + 3) !== 'Z';
  } catch {
    return false;
  }
};

function ask(host: string, port: number): Promise<string> {
  return new Promise((resolve) => {
    const s = connect({ host, port, timeout: 2_000 });
    let got = '';
    s.on('data', (d) => (got += d));
    s.on('end', () => resolve(got));
    s.on('timeout', () => (s.destroy(), resolve('TIMEOUT')));
    s.on('error', (e: NodeJS.ErrnoException) => resolve(e.code ?? e.message));
    s.end('ping\n');
  });
}

testIf(
  test,
  support,
  'hosts have their own network stacks, reach each other and the test process by their addresses, from a range the host does not use',
  async () => {
    const used = hostRanges();
    await Cluster.with(['a', 'b'], async (c) => {
      assert.match(c.subnet, /^(10\.250|198\.1[89])\.\d+$/);
      // Before the cluster existed, no address or route of the host touched its /24.
      const mine = parseCidr(`${c.subnet}.0/24`)!;
      assert.ok(used.length > 0 && used.every((u) => !overlaps(u, mine)));
      const [a, b] = [c.host('a'), c.host('b')];
      assert.is(a.address, `${c.subnet}.10`);
      assert.is(b.address, `${c.subnet}.11`);
      const [ea, eb] = await Promise.all([c.spawn('a', ECHO), c.spawn('b', ECHO)]);
      assert.is(await eb.call('probe', { host: a.address, port: 7000 }), 'echo ping\n');
      assert.is(await ea.call('probe', { host: b.address, port: 7000 }), 'echo ping\n');
      // Same port on both hosts, no conflict: b's loopback is b's own (a's server is not on it).
      assert.is(await eb.call('probe', { host: '127.0.0.1', port: 7001 }), 'ECONNREFUSED');
      assert.is(await ask(a.address, 7000), 'echo ping\n');
    });
  },
);

function gone(hosts: Host[], bridge: string): void {
  const ns = namespaces();
  const ln = links();
  for (const h of hosts) {
    assert.not.ok(ns.includes(h.ns), `namespace ${h.ns} left`);
    assert.not.ok(ln.includes(h.veth), `veth ${h.veth} left`);
  }
  assert.not.ok(ln.includes(bridge), `bridge ${bridge} left`);
}

testIf(test, support, 'close stops the processes and removes namespaces, veths and the bridge', async () => {
  const c = Cluster.create(['a', 'b']);
  const p = await c.spawn('a', ECHO);
  assert.ok(namespaces().includes(c.host('a').ns));
  await c.close();
  assert.ok(p.exited);
  gone(c.hosts, c.bridge);
});

/** What the dying run (fixtures/dying-run.ts) reports: its cluster's hosts and bridge, and the pid of the process inside. */
interface DyingReport {
  hosts: Host[];
  bridge: string;
  inside: number;
}

async function dyingRun(): Promise<{ child: ReturnType<typeof fork>; report: DyingReport }> {
  const child = fork(await compileWorkerScript(DYING), [], { execArgv: [], stdio: ['ignore', 'inherit', 'inherit', 'ipc'] });
  const report = await new Promise<DyingReport>((resolve, reject) => {
    const t = setTimeout(() => reject(new Error('the dying run did not report within 20 s')), 20_000);
    child.once('message', (m) => (clearTimeout(t), resolve(m as DyingReport)));
    child.once('exit', (code) => (clearTimeout(t), reject(new Error(`the dying run exited (${code})`))));
  });
  return { child, report };
}

const exit = (child: ReturnType<typeof fork>) =>
  new Promise<void>((r) => (child.exitCode !== null || child.signalCode !== null ? r() : child.once('exit', () => r())));

testIf(test, support, 'a run stopped by SIGTERM tears its cluster down in its signal handler', async () => {
  const { child, report } = await dyingRun();
  child.kill('SIGTERM');
  await exit(child);
  gone(report.hosts, report.bridge);
  for (let i = 0; i < 50 && alive(report.inside); i++) await new Promise((r) => setTimeout(r, 20));
  assert.not.ok(alive(report.inside), 'the process inside was killed');
});

testIf(test, support, 'a run killed by SIGKILL leaves its cluster; the next run removes it and what still ran inside', async () => {
  const { child, report } = await dyingRun();
  child.kill('SIGKILL');
  await exit(child);
  assert.ok(namespaces().includes(report.hosts[0]!.ns), 'left behind, as nothing of the run could run');
  assert.ok(alive(report.inside));
  const removed = sweepDeadRuns();
  for (const h of report.hosts) assert.ok(removed.includes(h.ns), `${h.ns} removed`);
  gone(report.hosts, report.bridge);
  for (let i = 0; i < 50 && alive(report.inside); i++) await new Promise((r) => setTimeout(r, 20));
  assert.not.ok(alive(report.inside), 'the process inside was killed');
});

test.run();
