// Every GraphQL operation the CLI sends, one file per domain of the API. Small, flat operations
// with explicit page sizes (cost limits accept them).
export * from './account.js';
export * from './hosts.js';
export * from './shards.js';
export * from './teams.js';
export * from './tokens.js';
