export { createFakePlugin, type FakePlugin, type FakePluginOptions } from './fake/fake-plugin.js';
export { FakeFaults, HeldStep } from './fake/faults.js';
export { FakeTransport } from './fake/fake-transport.js';
export { allocFakeDeviceMemory, fakeAddressOf, fakeBytesAt } from './fake/fake-memory.js';
export { transportConformance, pattern, assertBytes, type ConformancePair, type ConformanceOptions } from './conformance/suite.js';
export { LocalTargetMemory, checkPayload, type TargetMemory, type ReceivedNotification } from './conformance/target.js';
export { serveTargetProcess, spawnTargetProcess, type TargetProcess } from './conformance/target-process.js';
export { assertOptionRefused } from './options/assert-option-refused.js';
export { rawHttpAnswer, type RawAnswer } from './http/raw-answer.js';
export { freePort } from './ports.js';
export { tryToDetach } from './memory/try-to-detach.js';
// The tests of keepAttached's callers ask it where they import tryToDetach from.
export { TRANSFER_LISTS_KEEP_REGISTERED_BUFFERS } from '@te/connector';
export { until } from './waits/until.js';
export { bytesQueuedTo, tcpSocketsOf, type TcpSocket } from './waits/tcp-sockets.js';
export { compileWorkerScript } from './workers/compile-worker-script.js';
export { exitWithParent } from './workers/exit-with-parent.js';
export { describeThreads, exitsWithin, isRunning, stopProcess, survivors } from './workers/process-state.js';
export { cpuSeconds, DescriptorHoard } from './workers/descriptors.js';
