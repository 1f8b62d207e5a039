// The chaos soak's processes: two prefill instances of attention TP 2, each with its
// bootstrap server in a process of its own, and two decode instances of TP 2 x DP 2, the
// second behind the network namespace's link when there is one. The first rank of each
// side's instance 0 also runs the EC producer or consumer.
import { freePort } from '@te/testkit';
import { Proc } from './proc.mjs';

/**
 * Builds every process into `bootstraps`, `prefills` ([instance][tp]) and `decodes`
 * ([instance][dp][tp]) and starts them (bootstrap servers first, then prefills, then
 * decodes). What was built is in the arrays even when a start fails, for the caller to kill.
 */
export async function buildTopology({ host, ns, model, timeouts, launch }, { bootstraps, prefills, decodes }) {
  if (ns) ns.create();
  for (let i = 0; i < 2; i++) {
    const port = await freePort();
    bootstraps.push(new Proc(`bootstrap${i}`, { role: 'bootstrap', host, port }, launch));
  }
  for (let i = 0; i < 2; i++) {
    prefills.push([]);
    for (let tp = 0; tp < 2; tp++) {
      const layout = { attnTpSize: 2, attnTpRank: tp, attnDpSize: 1, attnDpRank: 0, ppSize: 1, ppRank: 0, systemDpSize: 1, systemDpRank: 0 };
      const spec = {
        role: 'prefill',
        host,
        controlPort: await freePort(),
        layout,
        model,
        timeouts,
        bootstrap: { host, port: bootstraps[i].spec.port },
        ...(i === 0 && tp === 0 ? { ec: 'producer' } : {}),
      };
      prefills[i].push(new Proc(`prefill${i}.tp${tp}`, spec, launch));
    }
  }
  for (let i = 0; i < 2; i++) {
    decodes.push([]);
    // Decode instance 1 lives behind the namespace's link (slowed by the tbf fault).
    const inNs = ns && i === 1;
    for (let dp = 0; dp < 2; dp++) {
      decodes[i].push([]);
      for (let tp = 0; tp < 2; tp++) {
        const layout = { attnTpSize: 2, attnTpRank: tp, attnDpSize: 2, attnDpRank: dp, ppSize: 1, ppRank: 0, systemDpSize: 1, systemDpRank: 0 };
        const spec = {
          role: 'decode',
          host: inNs ? ns.peerIp : host,
          controlPort: await freePort(),
          layout,
          model,
          timeouts,
          bootstrap: { host, port: 0 },
          ...(i === 0 && dp === 0 && tp === 0 ? { ec: 'consumer' } : {}),
        };
        decodes[i][dp].push(new Proc(`decode${i}.dp${dp}.tp${tp}`, spec, launch, inNs ? ns : undefined));
      }
    }
  }
  await Promise.all(bootstraps.map((b) => b.start()));
  await Promise.all(prefills.flat().map((p) => p.start()));
  await Promise.all(decodes.flat(2).map((d) => d.start()));
}
