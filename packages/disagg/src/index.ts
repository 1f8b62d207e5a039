// @te/disagg: the disaggregation runtime on @te/connector's public API only.
export * from './pd/index.js';
export * from './vllm/index.js';
export * from './ec/index.js';
export { RUNTIME_ENVIRONMENT_VARIABLES } from './environment.js';
