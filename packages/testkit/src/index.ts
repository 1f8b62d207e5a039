export { createFakePlugin, type FakePlugin, type FakePluginOptions } from './fake/fake-plugin.js';
export { FakeFaults } from './fake/faults.js';
export { FakeTransport } from './fake/fake-transport.js';
export { allocFakeDeviceMemory, fakeAddressOf, fakeBytesAt } from './fake/fake-memory.js';
export { transportConformance, pattern, assertBytes, type ConformancePair, type ConformanceOptions } from './conformance/suite.js';
export { LocalTargetMemory, checkPayload, type TargetMemory, type ReceivedNotification } from './conformance/target.js';
export { serveTargetProcess, spawnTargetProcess, type TargetProcess } from './conformance/target-process.js';
export { freePort } from './ports.js';
export { compileWorkerScript } from './workers/compile-worker-script.js';
