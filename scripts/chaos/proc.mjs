// One process of the chaos soak as the driver sees it: started with its spec, called over
// IPC (each call answered or failed by its deadline), signalled, killed and restarted.
import { fork } from 'node:child_process';

export class Proc {
  /**
   * @param {string} name
   * @param {object} spec what the worker is (TE_CHAOS_SPEC)
   * @param {{ script: string, env: object, verbose: boolean, callTimeoutMs: number }} launch how every worker starts
   * @param {import('./netns.mjs').Namespace} [ns] the network namespace it runs in
   */
  constructor(name, spec, launch, ns) {
    this.name = name;
    this.spec = spec;
    this.launch = launch;
    this.ns = ns;
    this.state = 'down';
    this.restarts = 0;
    this.lastSuccessAt = 0;
    this.restartedAt = 0;
    this.baseline = undefined;
  }

  async start() {
    this.state = 'starting';
    const execArgv = this.ns ? ['netns', 'exec', this.ns.name, process.execPath] : [];
    const child = fork(this.launch.script, [], {
      env: { ...process.env, TE_CHAOS_SPEC: JSON.stringify(this.spec), ...this.launch.env },
      execArgv,
      ...(this.ns ? { execPath: 'ip' } : {}),
      stdio: ['ignore', 'ignore', this.launch.verbose ? 'inherit' : 'ignore', 'ipc'],
    });
    this.child = child;
    this.pending = new Map();
    this.next = 1;
    child.on('message', (m) => {
      const p = this.pending.get(m.id);
      if (!p) return;
      this.pending.delete(m.id);
      if (m.ok) p.resolve(m.value);
      else p.reject(new Error(m.error));
    });
    child.on('error', () => undefined);
    child.on('exit', () => {
      if (this.child === child) this.state = 'down';
      for (const p of this.pending.values()) p.reject(new Error(`${this.name} exited`));
      this.pending.clear();
    });
    await new Promise((resolve, reject) => {
      const t = setTimeout(() => reject(new Error(`${this.name} did not start within 60 s`)), 60_000);
      let why = '';
      const onReady = (m) => {
        if (m.event === 'startFailed') why = `: ${m.message}`;
        if (m.event !== 'ready') return;
        clearTimeout(t);
        child.off('message', onReady);
        resolve();
      };
      child.on('message', onReady);
      child.once('exit', (code, signal) => {
        clearTimeout(t);
        reject(new Error(`${this.name} exited while starting (${signal ?? code})${why}`));
      });
    });
    this.state = 'up';
  }

  call(op, args = {}, timeoutMs = this.launch.callTimeoutMs) {
    if (this.state !== 'up' && this.state !== 'stopped') return Promise.reject(new Error(`${this.name} is ${this.state}`));
    const child = this.child;
    return new Promise((resolve, reject) => {
      const id = this.next++;
      const t = setTimeout(() => {
        this.pending.delete(id);
        reject(new Error(`${this.name}: ${op} did not answer within ${timeoutMs} ms`));
      }, timeoutMs);
      this.pending.set(id, { resolve: (v) => (clearTimeout(t), resolve(v)), reject: (e) => (clearTimeout(t), reject(e)) });
      child.send({ id, op, args }, (e) => e && undefined);
    });
  }

  signal(sig) {
    try {
      process.kill(this.child.pid, sig);
    } catch {
      // already gone
    }
  }

  async kill() {
    const gone = new Promise((r) => (this.child.exitCode !== null || this.child.signalCode !== null ? r() : this.child.once('exit', r)));
    this.state = 'down';
    this.signal('SIGCONT');
    this.signal('SIGKILL');
    await gone;
  }

  async close() {
    if (this.state === 'down') return;
    this.signal('SIGCONT');
    const gone = new Promise((r) => this.child.once('exit', r));
    this.call('close', {}, 20_000).catch(() => undefined);
    const t = setTimeout(() => this.signal('SIGKILL'), 20_000);
    await gone;
    clearTimeout(t);
  }
}
