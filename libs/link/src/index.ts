export * from './nats-connection.js';
export * from './nest-logger.js';
export * from './nats-jwt.js';
