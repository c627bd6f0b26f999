// Faults the simulated agents inject into what they send (heartbeats, state events, command
// replies): each message is dropped, delayed, duplicated, held back behind the next one
// (reordered), replaced by a malformed one, or sent under another host's id, each with its
// own probability. All off by default.
import { agentSubjects } from '@gpushards/protocol';

const KINDS = ['drop', 'delay', 'duplicate', 'reorder', 'malformed', 'forge'];

export class Faults {
  /** rates: {drop: 0.01, delay: 0.01, ...}; delayMs: how long a delayed message waits. */
  constructor({ rates = {}, delayMs = 3000 } = {}) {
    this.rates = Object.fromEntries(KINDS.map((kind) => [kind, Number(rates[kind] ?? 0)]));
    this.delayMs = delayMs;
    this.counts = Object.fromEntries([...KINDS, 'messages'].map((kind) => [kind, 0]));
    this.held = new Map();
  }

  pick() {
    let roll = Math.random();
    for (const kind of KINDS) {
      roll -= this.rates[kind];
      if (roll < 0) return kind;
    }
    return undefined;
  }

  /** Sends one message (kind: heartbeat or state) through `send`, perhaps with a fault. */
  async publish(agent, kind, message, send) {
    this.counts.messages++;
    const fault = this.pick();
    if (fault !== undefined) this.counts[fault]++;
    const release = this.held.get(agent.hostId);
    switch (fault) {
      case 'drop':
        return;
      case 'delay':
        setTimeout(() => void send(message).catch(() => undefined), this.delayMs);
        return;
      case 'duplicate':
        await send(message);
        await send(message);
        break;
      case 'reorder':
        // Held until this host's next message has gone.
        if (release === undefined) {
          this.held.set(agent.hostId, () => send(message));
          return;
        }
        await send(message);
        break;
      case 'malformed': {
        const subject = agentSubjects(agent.hostId)[kind];
        agent.link.connection?.publish(subject, '{"protocolVersion":1,"hostId":');
        break;
      }
      case 'forge': {
        // Another host's id in the body, on this host's own subject (its user may publish
        // nowhere else): the control plane must drop it.
        const other = `${agent.hostId === 'host-0000' ? 'host-0001' : 'host-0000'}`;
        await send({ ...message, hostId: other }).catch(() => undefined);
        break;
      }
      default:
        await send(message);
    }
    if (release !== undefined) {
      this.held.delete(agent.hostId);
      await release().catch(() => undefined);
    }
  }

  /** A command reply: dropped or delayed replies make the control plane retry the command. */
  async answer(_agent, reply) {
    this.counts.messages++;
    const fault = this.pick();
    if (fault === 'drop' || fault === 'delay') {
      this.counts[fault]++;
      // Past the control plane's wait: it sends the command again with the same id, which
      // the journal answers.
      await new Promise((r) => setTimeout(r, fault === 'drop' ? 60_000 : this.delayMs));
    }
    return reply;
  }
}
