#!/usr/bin/env node
import { Command, Option } from 'commander';
import pc from 'picocolors';
import { isTransferError } from '@te/connector';
import { benchCommand, type BenchCliOptions } from './commands/bench.js';
import { benchPdCommand, type BenchPdCliOptions } from './commands/bench-pd.js';
import { demoCommand, type DemoOptions } from './commands/demo.js';
import { printDoctor, runDoctor } from './commands/doctor.js';
import { UsageError } from './usage-error.js';

/** Commander's own refusals of a command line: exit 2, as te's UsageError, not Commander's 1. */
const USAGE_ERRORS = new Set([
  'commander.unknownOption',
  'commander.unknownCommand',
  'commander.missingArgument',
  'commander.optionMissingArgument',
  'commander.missingMandatoryOptionValue',
  'commander.conflictingOption',
  'commander.excessArguments',
  'commander.invalidArgument',
]);

// Positional options: what follows a subcommand is the subcommand's (`te bench pd --json`).
// The exit override is set before any subcommand is added, so that each inherits it.
const program = new Command('te')
  .description('te: KV and encoder cache transfer for disaggregated LLM serving')
  .showHelpAfterError()
  .enablePositionalOptions()
  .exitOverride((error) => process.exit(USAGE_ERRORS.has(error.code) ? 2 : error.exitCode));
const collect = (value: string, previous: string[]) => [...previous, value];

program
  .command('doctor')
  .description('list installed transport plugins, what hardware they found, and the effective config')
  .option('--plugin <name>', 'the connector to check (default: $TE_CONNECTOR, the config, or mooncake-tcp)')
  .option('--module-path <path>', 'package or file of a third-party plugin (implies its name)')
  .option('--json', 'print the report as JSON')
  .action(async (o: { json?: boolean; plugin?: string; modulePath?: string }) => {
    const report = await runDoctor(process.env, { ...(o.plugin ? { plugin: o.plugin } : {}), ...(o.modulePath ? { modulePath: o.modulePath } : {}) });
    if (o.json) console.log(JSON.stringify(report, (_k, v) => (typeof v === 'bigint' ? v.toString() : v)));
    else printDoctor(report);
    if (!report.ok) process.exitCode = 1;
  });

program
  .command('demo')
  .description('the EPD pipeline on loopback: encoder, prefill and decode processes behind an OpenAI-style proxy, every request verified')
  .option('--connector <name>', 'transport plugin (default: $TE_CONNECTOR, the config, or mooncake-tcp)')
  .option('--module-path <path>', 'package or file of a third-party plugin (implies its name)')
  .option('--layers <n>', 'model layers', '16')
  .option('--tokens <n>', 'text tokens per request', '256')
  .option('--image-tokens <n>', 'tokens per image', '64')
  .option('--hidden <n>', 'embedding width', '1024')
  .option('--requests <n>', 'requests to send', '12')
  .option('--concurrency <n>', 'requests in flight', '4')
  .option('--layer-ms <ms>', 'simulated compute per prefill layer', '4')
  .option('--encode-ms <ms>', 'simulated compute per image', '5')
  .option('--images <n>', 'distinct images the requests share', '8')
  .option('--pool-images <n>', "images the encoder's transfer pool holds (fewer than --images: eviction runs)", '6')
  .option('--fail-encoder <n>', "make the encoder fail on request n's images (repeatable)", collect, [])
  .option('--json', 'print one JSON object as the last line of stdout')
  .action((o: DemoOptions) => demoCommand(o));

const bench = program
  .command('bench')
  .enablePositionalOptions()
  .description('measure a transport: throughput, requests/s and batch latency (p50/p99)')
  .addOption(new Option('--mode <mode>', 'initiator, or target (serves a buffer)').choices(['initiator', 'target']).default('initiator'))
  .option('--loopback', 'start the target as a second process on this machine')
  .option('--target <host:port>', 'segment of a running `te bench --mode target`')
  .option('--plugin <name>', 'transport plugin (default: $TE_CONNECTOR, the config, or mooncake-tcp)')
  .option('--module-path <path>', 'package or file of a third-party plugin (as config modulePath; implies its name)')
  .addOption(new Option('--exit-with-parent', 'target: stop when stdin closes (used by --loopback)').hideHelp())
  .option('--sweep', 'block sizes 4 KiB … 64 MiB for each --plugin (comma-separated), beside memcpy and iperf3 measured in the same run')
  .option('--sizes <list>', 'sweep: block sizes instead of the default (e.g. 4KiB,1MiB)')
  .option('--out <file>', 'sweep: write an SVG chart of GB/s and p99 per block size')
  .option('--op <op>', 'write or read', 'write')
  .option('--block-size <bytes>', 'bytes per request (4096, 64k, 1MiB)', '1MiB')
  .option('--batch-size <n>', 'requests per batch', '1')
  .option('--concurrency <n>', 'batches in flight', '4')
  .option('--duration <s>', 'seconds to measure', '5')
  .option('--verify', 'check every byte that landed (sha256 on both sides)')
  .option('--json', 'print one JSON object as the last line of stdout')
  .option('--bind <address>', 'address to bind and advertise')
  .option('--port <n>', 'target: control port (0 = any)', '0')
  .option('--bytes <n>', 'target: size of the served buffer')
  .option('--timeout <ms>', 'deadline of each batch', '30000')
  .option('--option <key=value>', 'transport option (repeatable)', collect, [])
  .addOption(
    new Option('--wire <protocol>', 'te, or mooncake: talk to Mooncake Transfer Engine peers over their own protocol (mooncake-wire; unauthenticated)')
      .choices(['te', 'mooncake'])
      .default('te'),
  )
  .action((o: BenchCliOptions) => benchCommand(o));

bench
  .command('pd')
  .description('PD KV transfer through @te/disagg from a prefill process to a decode process on this machine, KV checksums off and on; every room verified')
  .option('--connector <name>', 'transport plugin (default: $TE_CONNECTOR, the config, or mooncake-tcp)')
  .option('--module-path <path>', 'package or file of a third-party plugin (as config modulePath; implies its name)')
  .option('--tokens <n>', 'tokens per room (pages of 64)', '8192')
  .option('--layers <n>', 'layers of the model (8 KV heads × 128 dim bf16)', '32')
  .option('--rooms <n>', 'timed rooms per mode, after one warm-up room', '3')
  .addOption(new Option('--checksums <mode>', 'both (off and on, rooms alternating), on or off').choices(['both', 'on', 'off']).default('both'))
  .addOption(new Option('--corrupt', 'test hook: flip one landed byte after the first timed room (the run must fail)').hideHelp())
  .option('--json', 'print one JSON object as the last line of stdout')
  .action((o: BenchPdCliOptions) => benchPdCommand(o));

// A command whose work is still pending when nothing is left to run (no socket, timer or child
// to wait for) never settles: without this, Node.js would end with exit 0, as if it passed.
let ended = false;
process.once('beforeExit', () => {
  if (ended) return;
  console.error(
    pc.red('te: the command ended before its work did: nothing was left to wait for (a promise that can never settle, in te or in a plugin) [INTERNAL]'),
  );
  process.exitCode = 1;
});

program
  .parseAsync(process.argv)
  .finally(() => (ended = true))
  .catch((error: unknown) => {
    if ((error as { quiet?: boolean }).quiet) {
      process.exitCode = (error as { exitCode?: number }).exitCode ?? 1;
      return;
    }
    if (error instanceof UsageError) {
      console.error(pc.red(`te: ${error.message}`));
      process.exitCode = 2;
      return;
    }
    const code = isTransferError(error) ? ` [${error.code}]` : '';
    console.error(pc.red(`te: ${(error as Error)?.message ?? String(error)}${code}`));
    process.exitCode = 1;
  });
