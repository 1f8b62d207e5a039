import type { LogLevel } from '../config/types.js';

const ORDER: Record<LogLevel, number> = { trace: 0, debug: 1, info: 2, warn: 3, error: 4, silent: 5 };

export type Log = (level: 'debug' | 'info' | 'warn' | 'error', message: string) => void;

/** A minimal leveled logger on stderr (MC_LOG_LEVEL picks the threshold). */
export function createLogger(threshold: LogLevel, prefix: string): Log {
  return (level, message) => {
    if (ORDER[level] < ORDER[threshold]) return;
    process.stderr.write(`${new Date().toISOString()} ${level.toUpperCase()} ${prefix} ${message}\n`);
  };
}
