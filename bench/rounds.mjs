// What the benches that compare builds in rounds share: a fresh copy of one template database
// per run, and the closing table.
import os from 'node:os';
import pg from 'pg';

let copies = 0;

/**
 * A new database on `server` copied from `template` (a createTestDatabase result), named
 * `${prefix}_${pid}_${n}`; `drop()` removes it, closing whatever is still connected.
 */
export async function copyOfTemplate(server, template, prefix) {
  const name = `${prefix}_${process.pid}_${copies++}`;
  await adminQuery(
    server,
    `CREATE DATABASE ${name} TEMPLATE "${template.config.url.split('/').pop()}"`,
  );
  return {
    name,
    url: server.urlFor(name),
    drop: () => adminQuery(server, `DROP DATABASE ${name} WITH (FORCE)`),
  };
}

async function adminQuery(server, statement) {
  const admin = new pg.Client({ connectionString: server.url });
  await admin.connect();
  try {
    await admin.query(statement);
  } finally {
    await admin.end();
  }
}

/** The machine, then the rows as a table: the end of every bench's output. */
export function printRows(rows, note = '') {
  console.log(`${os.cpus().length} × ${os.cpus()[0]?.model}, Node ${process.version}${note}`);
  console.table(rows);
}
