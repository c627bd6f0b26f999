export * from './priority.js';
export * from './fair-share.js';
export * from './guarantees.js';
export * from './model.js';
export * from './reclaim.js';
export * from './admission.js';
export * from './estimate.js';
export * from './placement-rate.js';
