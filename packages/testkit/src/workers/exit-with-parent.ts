/**
 * Makes a worker process end when its parent's IPC channel closes (the parent finished,
 * was killed or timed out), so no orphan keeps its ports, memory and threads.
 *
 * The worker ends by SIGKILL, not `process.exit()`. `process.exit()` shuts V8's platform
 * down by joining its worker threads, and a background task (a concurrent compile, an
 * allocation) that is waiting there for a garbage collection on the main thread never
 * returns: the process then hangs in its exit for good (nodejs/node#54918, seen under
 * Node.js 26 with a rank that exited while its startup code was still being compiled). An
 * orphan has no one to read its exit status, and the kernel releases its sockets and memory.
 */
export function exitWithParent(): void {
  process.on('disconnect', () => process.kill(process.pid, 'SIGKILL'));
}
