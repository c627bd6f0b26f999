export * from './sizes.js';
export * from './inventory.js';
export * from './placement.js';
export * from './quota.js';
export * from './accounting.js';
export * from './gpu-accounting.js';
export * from './placement-index.js';
export * from './lifecycle/index.js';
