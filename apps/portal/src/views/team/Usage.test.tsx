import { act } from 'react';
import { afterEach, describe, expect, it, vi } from 'vitest';
import { button, mount, typeInto } from '../../testing/dom.js';
import { Usage } from './Usage.js';

// urql's own React is another copy than the portal's under Vitest (the build dedupes them):
// the component gets its client from this stand-in instead of urql's Provider.
const clientInUse = vi.hoisted(() => ({ current: undefined as unknown }));
vi.mock('urql', () => ({ useClient: () => clientInUse.current }));

/** A client whose usage answers (each day of the window: 1, 0.5 and 0.25) wait for the test. */
function heldClient() {
  const pending: (() => void)[] = [];
  const client = {
    query: (_document: unknown, variables: { from: string; to: string }) => ({
      toPromise: () =>
        new Promise((resolve) => {
          const days: object[] = [];
          for (
            let at = Date.parse(variables.from);
            at < Date.parse(variables.to);
            at += 86_400_000
          ) {
            days.push({
              day: new Date(at).toISOString().slice(0, 10),
              reservedGibHours: 1,
              usedGibHours: 0.5,
              suspendedGibHours: 0.25,
              peakUsed: { bytes: '1024' },
            });
          }
          pending.push(() => resolve({ data: { usage: { days } } }));
        }),
    }),
  };
  const answerAll = () =>
    act(async () => {
      for (const answer of pending.splice(0)) answer();
      await new Promise((resolve) => setTimeout(resolve, 0));
    });
  return { client, pending, answerAll };
}

let view: ReturnType<typeof mount>;
afterEach(() => view.unmount());

const summary = () =>
  [...view.container.querySelectorAll('p')].find((p) =>
    /GiB-hours reserved/.test(p.textContent ?? ''),
  )?.textContent;

describe('Usage', () => {
  it('keeps the rows it shows, and their export, while a new window loads', async () => {
    const { client, pending, answerAll } = heldClient();
    clientInUse.current = client;
    view = mount(<Usage teamId="t1" teamName="demo" />);
    const exportButton = () => button(view.container, 'Export CSV');
    expect(exportButton().disabled).toBe(true);
    expect(pending.length).toBe(1);
    await answerAll();
    expect(exportButton().disabled).toBe(false);
    const shown = summary();
    expect(shown).toMatch(/^7 GiB-hours reserved, 3.5 used, 1.75 suspended in host RAM, UTC days/);

    const from = view.container.querySelector<HTMLInputElement>('input[type="date"]')!;
    const earlier = new Date(Date.parse(`${from.value}T00:00:00Z`) - 86_400_000);
    typeInto(from, earlier.toISOString().slice(0, 10));
    expect(pending.length).toBe(1); // the whole window in one request

    // While the new window's answers are outstanding, the old rows stay, still exportable.
    expect(exportButton().disabled).toBe(false);
    expect(summary()).toBe(shown);

    await answerAll();
    expect(summary()).toMatch(/^8 GiB-hours reserved/);
  });
});
