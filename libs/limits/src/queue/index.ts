export * from './priority.js';
export * from './fair-share.js';
export * from './guarantees.js';
export * from './model.js';
export * from './reclaim.js';
export {
  admit,
  admitWholePass,
  type AdmissionInput,
  type AdmissionPlan,
  type Placement,
  type Preemption,
  type Resume,
  type Suspension,
  type WaitReason,
  type Waiting,
} from './admission.js';
export * from './admission-queue.js';
export * from './make-room.js';
export * from './estimate.js';
export * from './placement-rate.js';
