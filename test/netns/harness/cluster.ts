import { spawn, type ChildProcess } from 'node:child_process';
import { ip, quietly, run } from './ip.js';
import { killInside, nextName, sweepDeadRuns } from './names.js';
import { spawnNode, type NodeProcess, type SpawnOptions } from './node.js';
import { freeSubnet } from './subnet.js';

/*
 * Several "hosts" on one machine: each a network namespace with lo up and one veth (eth0
 * inside) attached to a bridge the cluster creates; addresses from a /24 nothing on the
 * host uses. The bridge holds .1, so the test process itself (in the host namespace) can
 * reach every host, as a client or router would; hosts get .10, .11, … in order.
 *
 * Everything is removed by close(), and also by a process 'exit' or signal handler when a
 * test fails or the runner is interrupted; what a SIGKILLed run left is removed by the
 * next run (sweepDeadRuns), recognised by the dead pid in its names.
 */
export interface Host {
  name: string;
  ns: string;
  address: string;
  /** The host-side end of the host's veth (its peer is eth0 inside the namespace). */
  veth: string;
}

const live = new Set<Cluster>();
const SIGNALS = ['SIGINT', 'SIGTERM', 'SIGHUP'] as const;
let hooked = false;
let swept = false;

function onSignal(signal: NodeJS.Signals): void {
  for (const c of live) c.destroySync();
  for (const s of SIGNALS) process.off(s, onSignal);
  // Default action (terminate) unless someone else handles this signal too.
  if (process.listenerCount(signal) === 0) process.kill(process.pid, signal);
}

function hook(): void {
  if (hooked) return;
  hooked = true;
  process.on('exit', () => {
    for (const c of live) c.destroySync();
  });
  for (const s of SIGNALS) process.on(s, onSignal);
}

export class Cluster {
  readonly hosts: Host[] = [];
  readonly subnet: string;
  readonly bridge: string;
  readonly gateway: string;
  private readonly processes = new Set<NodeProcess>();
  private readonly others = new Set<ChildProcess>();
  private destroyed = false;

  private constructor(
    names: string[],
    private readonly mtu?: number,
  ) {
    hook();
    if (!swept) {
      swept = true;
      sweepDeadRuns();
    }
    live.add(this);
    this.subnet = freeSubnet();
    this.gateway = `${this.subnet}.1`;
    this.bridge = nextName('bridge');
    try {
      ip('link', 'add', this.bridge, 'type', 'bridge');
      if (mtu) ip('link', 'set', this.bridge, 'mtu', String(mtu));
      ip('addr', 'add', `${this.gateway}/24`, 'dev', this.bridge);
      ip('link', 'set', this.bridge, 'up');
      names.forEach((name, i) => this.addHost(name, `${this.subnet}.${10 + i}`));
    } catch (e) {
      this.destroySync();
      throw e;
    }
  }

  /** Creates the hosts, named by role ("prefill", "decode", …); links have the veth default MTU (1500) unless given. */
  static create(names: string[], o: { mtu?: number } = {}): Cluster {
    return new Cluster(names, o.mtu);
  }

  /** Runs `fn` on a fresh cluster and always tears it down. */
  static async with<T>(names: string[], fn: (c: Cluster) => Promise<T>): Promise<T> {
    const c = new Cluster(names);
    try {
      return await fn(c);
    } finally {
      await c.close();
    }
  }

  private addHost(name: string, address: string): void {
    const ns = nextName('ns');
    const veth = nextName('ns');
    // Recorded before creation, so a half-built host is still torn down.
    this.hosts.push({ name, ns, address, veth });
    ip('netns', 'add', ns);
    ip('link', 'add', veth, 'type', 'veth', 'peer', 'name', 'eth0', 'netns', ns);
    if (this.mtu) {
      ip('link', 'set', veth, 'mtu', String(this.mtu));
      ip('-n', ns, 'link', 'set', 'eth0', 'mtu', String(this.mtu));
    }
    ip('link', 'set', veth, 'master', this.bridge, 'up');
    ip('-n', ns, 'addr', 'add', `${address}/24`, 'dev', 'eth0');
    ip('-n', ns, 'link', 'set', 'eth0', 'up');
    ip('-n', ns, 'link', 'set', 'lo', 'up');
  }

  host(name: string): Host {
    const h = this.hosts.find((x) => x.name === name);
    if (!h) throw new Error(`no host ${name} in this cluster (${this.hosts.map((x) => x.name).join(', ')})`);
    return h;
  }

  /** Starts a Node.js process on a host; it is stopped (or killed) by close(). */
  async spawn(host: string, script: string, o: SpawnOptions = {}): Promise<NodeProcess> {
    const p = await spawnNode(this.host(host).ns, script, o);
    this.processes.add(p);
    if (this.destroyed) p.kill();
    return p;
  }

  /** Starts any program on a host (a service such as etcd); killed by close(). */
  start(host: string, cmd: string, args: string[], o: { env?: NodeJS.ProcessEnv } = {}): ChildProcess {
    const child = spawn('ip', ['netns', 'exec', this.host(host).ns, cmd, ...args], { env: { ...process.env, ...o.env }, stdio: ['ignore', 'ignore', 'pipe'] });
    child.on('error', () => undefined);
    this.others.add(child);
    if (this.destroyed) child.kill('SIGKILL');
    return child;
  }

  /** Runs a command inside a host's namespace (synchronously, with a deadline). */
  exec(host: string, cmd: string, args: string[], timeoutMs = 10_000): string {
    return run('ip', ['netns', 'exec', this.host(host).ns, cmd, ...args], timeoutMs);
  }

  /** Impairs one host's link in both directions: netem on eth0 (egress) and on the host-side veth (ingress). */
  impair(host: string, o: { delayMs: number; lossPercent: number }): void {
    const h = this.host(host);
    const netem = ['netem', 'delay', `${o.delayMs}ms`, 'loss', `${o.lossPercent}%`];
    run('tc', ['-n', h.ns, 'qdisc', 'add', 'dev', 'eth0', 'root', ...netem]);
    run('tc', ['qdisc', 'add', 'dev', h.veth, 'root', ...netem]);
  }

  /**
   * Slows what is sent to one host: a token-bucket qdisc (tbf) on the host-side veth, so
   * packets toward the host queue for up to `queueMs` before they arrive. Like a long, thin
   * link, it keeps bytes in flight after their sender has moved on (or reset the connection).
   */
  rateLimit(host: string, o: { mbit: number; queueMs: number }): void {
    run('tc', ['qdisc', 'add', 'dev', this.host(host).veth, 'root', 'tbf', 'rate', `${o.mbit}mbit`, 'burst', '64kb', 'latency', `${o.queueMs}ms`]);
  }

  /** Bytes the host's eth0 received and sent so far (what crossed its link). */
  counters(host: string): { rx: number; tx: number } {
    const [link] = JSON.parse(ip('-n', this.host(host).ns, '-s', '-j', 'link', 'show', 'eth0')) as {
      stats64: { rx: { bytes: number }; tx: { bytes: number } };
    }[];
    return { rx: link!.stats64.rx.bytes, tx: link!.stats64.tx.bytes };
  }

  /** Stops every Node.js process started by spawn (each asked to close, killed after a deadline). */
  async stopProcesses(): Promise<void> {
    await Promise.all([...this.processes].map((p) => p.stop().catch(() => p.kill())));
  }

  /** Stops every process, then removes the network. */
  async close(): Promise<void> {
    await this.stopProcesses();
    this.destroySync();
  }

  /** Kills and removes everything at once; synchronous, for exit handlers. */
  destroySync(): void {
    if (this.destroyed) return;
    this.destroyed = true;
    for (const p of this.processes) p.kill();
    for (const child of this.others) if (child.exitCode === null && child.signalCode === null) child.kill('SIGKILL');
    for (const h of this.hosts) killInside(h.ns);
    for (const h of this.hosts) quietly('ip', ['link', 'del', h.veth]);
    quietly('ip', ['link', 'del', this.bridge]);
    for (const h of this.hosts) quietly('ip', ['netns', 'del', h.ns]);
    live.delete(this);
  }
}
