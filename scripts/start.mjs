#!/usr/bin/env node
// The README's first command. Until the one-box launcher lands (embedded PGlite, in-process agent)
// this says so plainly instead of pretending to start something.
console.log(
  'GPU Shards: the one-box launcher (control plane on embedded PGlite + in-process agent) is not built yet.\n' +
    'What exists today: `npm test` runs the limits, protocol and interposer test tiers.\n' +
    'Track progress in docs/architecture.md.',
);
process.exit(1);
