export * from './nats-connection.js';
export * from './nest-logger.js';
