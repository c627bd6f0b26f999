// Where the one-box's JSON log goes: every line to a file in the data folder, and a short
// human-readable line on the terminal for warnings and errors (and the few info messages a
// person watching the terminal wants), so the terminal shows the banner and what matters.
import { createWriteStream } from 'node:fs';

const LEVEL_NAMES = { 10: 'trace', 20: 'debug', 30: 'info', 40: 'WARN', 50: 'ERROR', 60: 'FATAL' };
const WARN = 40;
/** Fields that identify what a line is about, shown after the message when present. */
const CONTEXT_FIELDS = ['shardId', 'state', 'exitCode', 'reason', 'err'];

function describe(record) {
  const time = new Date(record.time ?? Date.now()).toTimeString().slice(0, 8);
  const context = CONTEXT_FIELDS.filter((field) => record[field] !== undefined)
    .map((field) => {
      const value = record[field];
      const text = typeof value === 'object' ? (value.message ?? JSON.stringify(value)) : value;
      return `${field}=${text}`;
    })
    .join(' ');
  const source = record.service ?? record.module ?? '';
  return `${time} ${LEVEL_NAMES[record.level] ?? record.level} ${source ? `[${source}] ` : ''}${record.msg ?? ''}${context ? ` (${context})` : ''}`;
}

/**
 * A pino destination (anything with `write(line)`). `show(record)` may pick extra lines for
 * the terminal besides warnings and errors.
 */
export function createLogSink(path, { terminal = process.stderr, show = () => false } = {}) {
  const file = createWriteStream(path, { flags: 'a', mode: 0o600 });
  return {
    write(line) {
      file.write(line);
      let record;
      try {
        record = JSON.parse(line);
      } catch {
        return;
      }
      if (record.level >= WARN || show(record)) terminal.write(`${describe(record)}\n`);
    },
    /** Flushes the file. */
    close() {
      return new Promise((resolve) => file.end(resolve));
    },
  };
}
