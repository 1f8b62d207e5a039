import { execFileSync } from 'node:child_process';
import { ip, quietly, run } from './ip.js';
import { nextName } from './names.js';

/*
 * Whether this machine can host the multi-host tests, and why not: they need root (or
 * CAP_NET_ADMIN and CAP_SYS_ADMIN), iproute2, and a kernel with network namespaces, veth
 * and bridges. The answer comes from trying, in a namespace created and removed here.
 */
export type Support = { ok: true } | { ok: false; reason: string };

let netns: Support | undefined;

function have(cmd: string): boolean {
  try {
    execFileSync(cmd, ['-V'], { stdio: 'ignore' });
    return true;
  } catch {
    return false;
  }
}

/** Creates a throwaway namespace, runs `probe` with its name, and always removes it. */
function inProbeNamespace<T>(probe: (ns: string) => T): T {
  const ns = nextName('ns');
  try {
    ip('netns', 'add', ns);
    return probe(ns);
  } finally {
    quietly('ip', ['netns', 'del', ns]);
  }
}

export function netnsSupport(): Support {
  if (netns) return netns;
  if (process.platform !== 'linux') return (netns = { ok: false, reason: `network namespaces are Linux-only (this is ${process.platform})` });
  if (process.getuid?.() !== 0) return (netns = { ok: false, reason: `creating network namespaces needs root (uid ${process.getuid?.()})` });
  if (!have('ip')) return (netns = { ok: false, reason: "iproute2's ip command is not installed (apt-get install -y iproute2)" });
  try {
    inProbeNamespace((ns) => {
      const veth = nextName('ns');
      try {
        ip('link', 'add', veth, 'type', 'veth', 'peer', 'name', 'eth0', 'netns', ns);
      } finally {
        quietly('ip', ['link', 'del', veth]);
      }
    });
    netns = { ok: true };
  } catch (e) {
    netns = { ok: false, reason: `cannot create a network namespace with a veth link here: ${(e as Error).message}` };
  }
  return netns;
}

const qdiscs = new Map<string, Support>();

/**
 * Whether `tc` can attach the qdisc `kind` (with `args`) in a namespace: minimal kernels
 * often lack one or another (`sch_netem`, `sch_tbf`). Asked once per kind.
 */
function qdiscSupport(kind: string, args: string[]): Support {
  const known = qdiscs.get(kind);
  if (known) return known;
  let answer = netnsSupport();
  if (answer.ok && !have('tc')) answer = { ok: false, reason: "iproute2's tc command is not installed" };
  if (answer.ok) {
    try {
      inProbeNamespace((ns) => run('tc', ['-n', ns, 'qdisc', 'add', 'dev', 'lo', 'root', kind, ...args]));
    } catch (e) {
      const message = (e as Error).message;
      answer = {
        ok: false,
        reason: /kind is unknown/i.test(message)
          ? `this kernel has no ${kind} qdisc (tc: 'Specified qdisc kind is unknown'; sch_${kind} is neither built in nor loadable)`
          : `tc cannot attach ${kind}: ${message}`,
      };
    }
  }
  qdiscs.set(kind, answer);
  return answer;
}

/** Whether `tc` can attach a netem qdisc (latency, loss), which Cluster.impair uses. */
export const netemSupport = (): Support => qdiscSupport('netem', ['delay', '1ms']);

/** Whether `tc` can attach a token-bucket qdisc (tbf), which Cluster.rateLimit uses. */
export const tbfSupport = (): Support => qdiscSupport('tbf', ['rate', '10mbit', 'burst', '64kb', 'latency', '100ms']);
