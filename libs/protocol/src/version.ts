/**
 * The version of the agent <-> control-plane protocol this build speaks. Every message
 * carries it; a receiver refuses any other value with UNSUPPORTED_VERSION. Additive,
 * optional fields do not change it; anything an older reader must not ignore does
 * (see README.md, "Versioning").
 */
export const PROTOCOL_VERSION = 1;
