// Which layer of te a JavaScript function belongs to, from a V8 profile's call frame (CPU or
// heap profile): the engine, a plugin, the bench driver, Node itself, a dependency, native code.

/** The layer of `callFrame` ({functionName, url}) for the per-layer tables of bench/. */
export function layerOf({ functionName, url }) {
  if (functionName === '(idle)') return 'idle';
  if (functionName === '(garbage collector)') return 'garbage collection';
  if (functionName === '(program)' || (!url && functionName !== '(root)')) return 'native (called from JS)';
  if (url.includes('/packages/connector/')) return 'engine (@te/connector)';
  // V8 counts the time of an addon method in the JS function that called it.
  if (url.includes('/plugins/') || url.includes('/packages/fabric/') || url.includes('/packages/cuda/'))
    return 'plugin (TypeScript + the addon calls it makes)';
  if (url.startsWith('node:')) return 'Node internals';
  if (url.includes('/node_modules/')) return 'dependencies';
  return 'bench driver (@te/cli)';
}

/** A function's name and place, short: "submit packages/connector/dist/index.cjs:3896". */
export function frameName({ functionName, url, lineNumber }) {
  return `${functionName || '(anonymous)'} ${url.replace(/^.*\/(packages|plugins)\//, '$1/')}:${lineNumber + 1}`;
}
