// Preloaded into a `te bench` initiator by bench/allocations.mjs (node --require): V8's
// sampling heap profiler over the whole run, counting objects the garbage collector has
// already freed too (what a run allocates, not what it keeps). The profile is written to
// $TE_HEAP_PROFILE when the process exits.
'use strict';
const inspector = require('node:inspector');
const { writeFileSync } = require('node:fs');

const out = process.env.TE_HEAP_PROFILE;
if (out) {
  const session = new inspector.Session();
  session.connect();
  const fail = (what, error) => {
    if (error) throw new Error(`heap sampler: ${what}: ${error.message}`);
  };
  session.post('HeapProfiler.enable', (e) => fail('enable', e));
  session.post(
    'HeapProfiler.startSampling',
    // One sample per 1 KiB allocated on average: a batch's few kilobytes are seen.
    { samplingInterval: 1024, includeObjectsCollectedByMajorGC: true, includeObjectsCollectedByMinorGC: true },
    (e) => fail('startSampling', e),
  );
  process.on('exit', () => {
    // A same-thread session answers synchronously, so this runs before the process ends.
    session.post('HeapProfiler.stopSampling', (e, r) => {
      fail('stopSampling', e);
      writeFileSync(out, JSON.stringify(r.profile));
    });
  });
}
