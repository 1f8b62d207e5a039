// A network namespace joined to the host by a veth pair, for the chaos soak's slowed link:
// the processes inside bind the namespace's address, the others the host end's, and
// `slow()` puts a token-bucket filter (tc tbf) on the host end for a while, so writes
// toward the namespace crawl. Needs root (or CAP_NET_ADMIN) and iproute2.
import { execFileSync } from 'node:child_process';

function run(args, options = {}) {
  return execFileSync(args[0], args.slice(1), { stdio: ['ignore', 'pipe', 'pipe'], ...options }).toString();
}

/** true, or why namespaces cannot be used here. */
export function netnsSupport() {
  if (process.getuid?.() !== 0) return 'not root';
  try {
    run(['ip', 'netns', 'list']);
    run(['tc', '-V']);
    return true;
  } catch (e) {
    return `iproute2 unusable: ${e.message.split('\n')[0]}`;
  }
}

export class Namespace {
  constructor(name) {
    this.name = name;
    const n = (process.pid % 200) + 20;
    this.hostIp = `10.213.${n}.1`;
    this.peerIp = `10.213.${n}.2`;
    this.hostLink = `${name.slice(0, 11)}h`;
    this.peerLink = `${name.slice(0, 11)}p`;
    this.slowUntil = 0;
  }

  create() {
    this.destroy();
    run(['ip', 'netns', 'add', this.name]);
    run(['ip', 'link', 'add', this.hostLink, 'type', 'veth', 'peer', 'name', this.peerLink]);
    run(['ip', 'link', 'set', this.peerLink, 'netns', this.name]);
    run(['ip', 'addr', 'add', `${this.hostIp}/24`, 'dev', this.hostLink]);
    run(['ip', 'link', 'set', this.hostLink, 'up']);
    run(['ip', 'netns', 'exec', this.name, 'ip', 'addr', 'add', `${this.peerIp}/24`, 'dev', this.peerLink]);
    run(['ip', 'netns', 'exec', this.name, 'ip', 'link', 'set', this.peerLink, 'up']);
    run(['ip', 'netns', 'exec', this.name, 'ip', 'link', 'set', 'lo', 'up']);
  }

  /** Limits the host → namespace direction to `rate` for `ms`, then lifts it. */
  async slow(rate, ms) {
    if (Date.now() < this.slowUntil) return;
    this.slowUntil = Date.now() + ms;
    run(['tc', 'qdisc', 'replace', 'dev', this.hostLink, 'root', 'tbf', 'rate', rate, 'burst', '32kbit', 'latency', '400ms']);
    await new Promise((r) => setTimeout(r, ms));
    try {
      run(['tc', 'qdisc', 'del', 'dev', this.hostLink, 'root']);
    } catch {
      // the namespace is already gone
    }
  }

  destroy() {
    try {
      run(['ip', 'netns', 'del', this.name]);
    } catch {
      // not there
    }
    try {
      run(['ip', 'link', 'del', this.hostLink]);
    } catch {
      // went with the namespace
    }
  }
}
