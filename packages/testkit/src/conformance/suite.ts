import { inspect } from 'node:util';
import { suite } from 'uvu';
import { batchCases, singleRequestCases } from './cases/data.js';
import { notificationCase } from './cases/notification.js';
import { malformedBatchCase, refusalCases } from './cases/refusals.js';
import type { CaseRegistry } from './cases/registry.js';
import { sharedTargetCase } from './cases/shared-target.js';
import { stallCases } from './cases/stall.js';
import type { ConformanceOptions, ConformancePair } from './types.js';

export { assertBytes, pattern } from './expect.js';

/**
 * uvu 0.5 formats a failure through its `name` and reads `details` as its own diff text; a
 * thrown value without a name (undefined, a plain object), or an Error whose `details` is
 * not a string (every TransferError that has details), makes the formatter throw, which
 * ends the suite silently with its remaining cases never run. Such a value becomes an Error
 * that says what was thrown: its name, code, message and details, with the original stack.
 */
function reportable(e: unknown): unknown {
  if (!(e instanceof Error) || typeof e.name !== 'string') return new Error(`the case threw a value that is not an Error: ${inspect(e, { depth: 4 })}`);
  const { details, code } = e as Error & { details?: unknown; code?: unknown };
  if (details === undefined || typeof details === 'string') return e;
  const out = new Error(`${e.name}${code !== undefined ? ` [${String(code)}]` : ''}: ${e.message} (details: ${inspect(details, { depth: 4 })})`, { cause: e });
  out.stack = `${out.name}: ${out.message}${e.stack?.slice(e.stack.indexOf('\n')) ?? ''}`;
  return out;
}
export type { ConformanceOptions, ConformancePair } from './types.js';

/**
 * The conformance suite every transport plugin runs: register, write, read, batches,
 * two initiators at one target, bounds, abort, deadline, notifications. Cases a plugin's capabilities exclude are
 * dropped with the reason printed.
 */
export function transportConformance(options: ConformanceOptions) {
  const test = suite<{ pair?: ConformancePair; setupError?: unknown }>(`conformance: ${options.name}`);
  const maxBytes = options.maxBytes ?? 1 << 20;
  // Larger than what loopback socket buffers absorb: a transport whose writes complete once
  // the data left the local buffer (a provider without delivery-complete) must still wait.
  const stallBytes = options.stallBytes ?? 32 << 20;
  const skipped: string[] = [];
  const requires = (caseName: string): string | undefined => {
    if (options.only && !options.only.includes(caseName)) return 'not selected (options.only)';
    if (caseName.startsWith('read') && !options.capabilities.read) return 'capabilities.read is false';
    if (caseName.startsWith('notification') && !options.capabilities.notifications) return 'capabilities.notifications is false';
    if (caseName.startsWith('two initiators') && !options.createInitiator) return 'options.createInitiator is not given';
    return options.exclude?.[caseName];
  };
  const it = (caseName: string, body: (pair: ConformancePair) => Promise<void>): void => {
    const reason = requires(caseName);
    if (reason) {
      skipped.push(`${caseName}: ${reason}`);
      // Registered, so the runner's summary counts it; the reason is in its name.
      test.skip(`${caseName} — skipped: ${reason}`, () => undefined);
      return;
    }
    test(caseName, async (ctx) => {
      // uvu 0.5 swallows errors thrown by `before` hooks: re-raise them in every case.
      if (!ctx.pair) throw ctx.setupError ?? new Error('conformance pair was not created');
      try {
        await body(ctx.pair);
      } catch (e) {
        throw reportable(e);
      }
    });
  };
  const needsStall = (caseName: string, body: (pair: ConformancePair) => Promise<void>): void =>
    it(caseName, async (pair) => {
      if (!pair.stall || !pair.resume)
        throw new Error(`${caseName} needs pair.stall/resume; exclude the case with a reason if the transport cannot provide them`);
      await body(pair);
    });

  test.before(async (ctx) => {
    try {
      ctx.pair = await options.createPair();
    } catch (error) {
      ctx.setupError = error;
    }
  });
  test.after(async (ctx) => {
    await ctx.pair?.close();
    if (skipped.length) console.log(`  ${options.name}: skipped cases:\n${skipped.map((s) => `    - ${s}`).join('\n')}`);
  });

  const cases: CaseRegistry = { it, needsStall, options, maxBytes, stallBytes };
  // The order the cases run in: one pair serves them all, the stalled peer after the data and refusal cases.
  singleRequestCases(cases);
  batchCases(cases);
  sharedTargetCase(cases);
  refusalCases(cases);
  stallCases(cases);
  notificationCase(cases);
  malformedBatchCase(cases);
  return test;
}
