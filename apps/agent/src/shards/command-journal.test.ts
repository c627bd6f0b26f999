import assert from 'node:assert/strict';
import { describe, it } from 'node:test';

import { CommandJournal } from './command-journal.js';

describe('CommandJournal', () => {
  it('acts once per command id and gives a retry the first reply', async () => {
    const journal = new CommandJournal<string>();
    let runs = 0;
    const execute = async () => `reply ${++runs}`;
    const first = journal.once('a', execute);
    const retry = journal.once('a', execute);
    assert.equal(first.repeated, false);
    assert.equal(retry.repeated, true);
    assert.equal(await first.reply, 'reply 1');
    assert.equal(await retry.reply, 'reply 1');
    assert.equal(await journal.once('b', execute).reply, 'reply 2');
    assert.equal(runs, 2);
  });

  it('a retry during the first delivery waits for the same reply', async () => {
    const journal = new CommandJournal<number>();
    let release!: (value: number) => void;
    let runs = 0;
    const execute = () => {
      runs++;
      return new Promise<number>((resolve) => (release = resolve));
    };
    const first = journal.once('a', execute);
    const retry = journal.once('a', execute);
    release(7);
    assert.deepEqual(await Promise.all([first.reply, retry.reply]), [7, 7]);
    assert.equal(runs, 1);
  });

  it('forgets the oldest commands past its capacity', async () => {
    const journal = new CommandJournal<string>(2);
    for (const id of ['a', 'b', 'c']) await journal.once(id, async () => id).reply;
    assert.equal(journal.size, 2);
    assert.equal(journal.once('a', async () => 'again').repeated, false);
    assert.equal(journal.once('c', async () => 'again').repeated, true);
    assert.throws(() => new CommandJournal(0), /at least one command/);
  });
});
