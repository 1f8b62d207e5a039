// A plugin's option checks, seen from outside: bad values, from the config or the environment,
// are INVALID_CONFIG before anything starts, and the message names the option.
import * as assert from 'uvu/assert';
import { TransferError, parseOptions, type OptionsSchema } from '@te/connector';

/** Each (config, environment) pair must be refused by `plugin`'s option parser with INVALID_CONFIG, its message matching `names`. */
export function assertOptionRefused(
  plugin: { name: string; options: OptionsSchema },
  cases: ReadonlyArray<readonly [Record<string, unknown>, Record<string, string>]>,
  names: RegExp,
): void {
  for (const [input, env] of cases) {
    let error: unknown;
    try {
      parseOptions(plugin.options, input, env, plugin.name);
    } catch (e) {
      error = e;
    }
    // Outside the try: an accepted case is reported as such, not as a wrong kind of error.
    if (error === undefined) assert.unreachable(`accepted ${JSON.stringify(input)} ${JSON.stringify(env)}`);
    assert.instance(error, TransferError);
    assert.is((error as TransferError).code, 'INVALID_CONFIG');
    assert.match((error as Error).message, names);
  }
}
