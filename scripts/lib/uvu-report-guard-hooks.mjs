// Module hooks for uvu-report-guard.mjs: uvu's formatter first passes the error it is given
// through globalThis.__teReportableError. Only uvu's own dist files are touched; if their text
// no longer has the expected line (another uvu version), loading fails loudly rather than
// running tests whose failures could vanish.
const FORMAT = "function format(name, err, suite = '') {";
const uvuDist = /\/node_modules\/uvu\/dist\/index\.m?js$/;

function patch(url, source) {
  // CommonJS loaded through require() has no source here on Node 20; te's tests are ES modules.
  if (source == null) return source;
  const text = typeof source === 'string' ? source : Buffer.from(source).toString('utf8');
  if (!text.includes(FORMAT)) throw new Error(`scripts/lib/uvu-report-guard: ${url} has no "${FORMAT}"; update the guard for this uvu version`);
  return text.replace(FORMAT, `${FORMAT}\n\terr = globalThis.__teReportableError(err);`);
}

export function load(url, context, nextLoad) {
  const result = nextLoad(url, context);
  if (!uvuDist.test(url)) return result;
  // Sync hooks (registerHooks) get a result; the loader-thread form gets a promise.
  if (typeof result?.then === 'function') return result.then((r) => ({ ...r, source: patch(url, r.source) }));
  return { ...result, source: patch(url, result.source) };
}
