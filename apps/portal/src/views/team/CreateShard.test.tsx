import { act } from 'react';
import { afterEach, describe, expect, it, vi } from 'vitest';
import { button, mount, typeInto } from '../../testing/dom.js';
import { CreateShard } from './CreateShard.js';

// The form's mutation and preview come from these stand-ins instead of urql (whose React is
// another copy than the portal's under Vitest).
const api = vi.hoisted(() => ({
  creates: [] as ((name: string) => void)[],
  inputs: [] as Record<string, unknown>[],
  allowElastic: false,
}));
vi.mock('urql', () => ({
  // The team (asked by id) says whether its quota allows elastic shards; the preview has none.
  useQuery: (args: { variables: { id?: string } }) => [
    args.variables.id === undefined
      ? { fetching: false }
      : {
          fetching: false,
          data: { team: { quotaPolicy: { allowElastic: api.allowElastic } } },
        },
  ],
  useMutation: () => [
    { fetching: false },
    (variables: { input: { name: string } }) =>
      new Promise((resolve) => {
        api.inputs.push(variables.input);
        api.creates.push((hostId) =>
          resolve({
            data: { createShard: { name: variables.input.name, state: 'PLACED', hostId } },
          }),
        );
      }),
  ],
}));

let view: ReturnType<typeof mount>;
afterEach(() => {
  view.unmount();
  api.allowElastic = false;
  api.inputs.length = 0;
});

const elasticBox = () =>
  [...view.container.querySelectorAll('label')]
    .find((l) => l.textContent?.startsWith('Elastic'))
    ?.querySelector<HTMLInputElement>('input[type="checkbox"]') ?? null;

const status = () => view.container.querySelector('[role="status"]')?.textContent ?? null;
const nameInput = () => view.container.querySelector<HTMLInputElement>('form input')!;

async function createNamed(name: string, hostId: string) {
  typeInto(nameInput(), name);
  act(() => button(view.container, 'Create').click());
  await act(async () => api.creates.shift()!(hostId));
}

describe('CreateShard', () => {
  it('says where the shard went until the form changes', async () => {
    view = mount(<CreateShard teamId="t1" />);
    await createNamed('first', 'host-a');
    expect(status()).toBe('Shard first is PLACED on host-a.');

    typeInto(nameInput(), 's');
    expect(status()).toBeNull();
  });

  it('says nothing of the last shard while the next request is out', async () => {
    view = mount(<CreateShard teamId="t1" />);
    await createNamed('first', 'host-a');
    expect(status()).toBe('Shard first is PLACED on host-a.');

    // The name field empties after a create: a repeat with the same name sends a new request.
    typeInto(nameInput(), 'second');
    act(() => button(view.container, 'Create').click());
    expect(status()).toBeNull();
    await act(async () => api.creates.shift()!('host-b'));
    expect(status()).toBe('Shard second is PLACED on host-b.');
  });

  it('offers isolated compute with what it means, and asks for a share with it', () => {
    view = mount(<CreateShard teamId="t1" />);
    const select = view.container.querySelector<HTMLSelectElement>('select')!;
    expect([...select.options].map((o) => o.value)).toEqual(['GUARANTEED', 'CAPPED', 'ISOLATED']);
    act(() => {
      select.value = 'ISOLATED';
      select.dispatchEvent(new Event('change', { bubbles: true }));
    });
    const hint = view.container.querySelector('#mode-help')!.textContent;
    expect(hint).toMatch(/MPS partition of its own, only on hosts that run one/);
    expect(hint).toMatch(/fixed while it runs/);
    expect(view.container.querySelector('#share-help')!.textContent).toMatch(
      /isolated needs a share/,
    );
    expect(button(view.container, 'Create').disabled).toBe(true);
  });

  it("offers Elastic only where the team's quota allows it, and sends it when ticked", async () => {
    view = mount(<CreateShard teamId="t1" />);
    expect(elasticBox()).toBeNull();

    // The quota now allows it (as the team's query answers once an admin sets it).
    api.allowElastic = true;
    view.rerender(<CreateShard teamId="t1" />);
    const box = elasticBox()!;
    expect(box.checked).toBe(false);
    act(() => box.click());
    await createNamed('notebook', 'host-a');
    expect(api.inputs.at(-1)).toMatchObject({ name: 'notebook', elastic: true });
    expect(elasticBox()!.checked).toBe(false);

    await createNamed('plain', 'host-a');
    expect(api.inputs.at(-1)).not.toHaveProperty('elastic');
  });
});
