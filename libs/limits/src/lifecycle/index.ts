export * from './states.js';
export * from './transitions.js';
export * from './next-state.js';
export * from './convergence.js';
export * from './stuck.js';
export * from './checkpoint.js';
