// Loaded (--import) into every test process scripts/uvu.mjs starts. uvu 0.5 formats a failed
// test by reading the error's `name` as a string and its `details` as its own diff text: a
// thrown non-Error, or an Error whose `details` is an object (a TransferError's are), makes
// the formatter throw, and uvu then drops the failure and every test after it in that suite
// without a word. This hook gives uvu's formatter an error it can print, with the original's
// name, code, message, details and stack; nothing else in uvu changes.
import * as module from 'node:module';
import { inspect, types } from 'node:util';

/** `err` as an Error whose `name` and `details` are strings (details shown in full). */
globalThis.__teReportableError = (err) => {
  if ((err instanceof Error || types.isNativeError(err)) && typeof err.name === 'string' && (err.details === undefined || typeof err.details === 'string'))
    return err;
  if (!(err instanceof Error) && !types.isNativeError(err)) {
    const wrapped = new Error(`a value that is not an Error was thrown: ${inspect(err, { depth: 4 })}`);
    wrapped.name = 'NonErrorThrown';
    wrapped.stack = `${wrapped.name}: ${wrapped.message}`; // a thrown value has no stack; this module's frames would mislead
    return wrapped;
  }
  const code = err.code !== undefined ? ` [${String(err.code)}]` : '';
  const wrapped = new Error(`${String(err.name)}${code}: ${err.message} (details: ${inspect(err.details, { depth: 4, breakLength: Infinity })})`);
  wrapped.name = String(err.name);
  wrapped.stack = `${wrapped.name}: ${wrapped.message}\n${String(err.stack ?? '')
    .split('\n')
    .slice(1)
    .join('\n')}`;
  return wrapped;
};

const hooks = new URL('./uvu-report-guard-hooks.mjs', import.meta.url);
// In-thread hooks where Node has them (22.15+, where module.register is on its way out); the
// loader-thread form on Node 20.
if (typeof module.registerHooks === 'function') module.registerHooks(await import(hooks));
else module.register(hooks);
