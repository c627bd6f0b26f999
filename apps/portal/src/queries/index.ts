// Every GraphQL document the portal sends, one file per domain of the API. Small, flat operations
// with explicit page sizes, so the API's cost limits accept them.
export * from './account.js';
export * from './events.js';
export * from './fleet.js';
export * from './shards.js';
export * from './teams.js';
export * from './tokens.js';
