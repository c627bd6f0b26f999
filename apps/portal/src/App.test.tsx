import { useEffect } from 'react';
import { afterEach, describe, expect, it, vi } from 'vitest';
import { mount } from './testing/dom.js';
import { Shell } from './App.js';

// The `me` answer the shell sees, set by each step of a test (urql's own hooks run another React
// under Vitest; see Usage.test.tsx).
const meResult = vi.hoisted(() => ({ current: {} as Record<string, unknown> }));
vi.mock('urql', () => ({
  useQuery: () => [meResult.current],
  Provider: ({ children }: { children: unknown }) => children,
}));
const mounts = vi.hoisted(() => ({ count: 0 }));
vi.mock('./views/team/TeamView.js', () => ({
  TeamView: ({ teamName }: { teamName: string }) => {
    useEffect(() => {
      mounts.count += 1;
    }, []);
    return <p data-testid="team-view">Team {teamName}</p>;
  },
}));

const member = {
  me: { name: 'probe', role: 'MEMBER', team: { id: 't1', name: 'demo' } },
};
const timedOut = {
  graphQLErrors: [{ message: 'the request ran past 10000 ms', extensions: { code: 'TIMEOUT' } }],
};

let view: ReturnType<typeof mount>;
afterEach(() => view.unmount());

function showing(result: Record<string, unknown>) {
  meResult.current = result;
  view = mount(<Shell signOut={() => undefined} />);
}

function answer(result: Record<string, unknown>) {
  meResult.current = result;
  view.rerender(<Shell signOut={() => undefined} />);
}

describe('Shell', () => {
  it('keeps the page (and what it holds) when a refetch of `me` fails, with the error above it', () => {
    mounts.count = 0;
    showing({ fetching: false, data: member });
    expect(view.container.querySelector('[data-testid="team-view"]')?.textContent).toBe(
      'Team demo',
    );
    answer({ fetching: true, data: member });
    answer({ fetching: false, data: undefined, error: timedOut });
    expect(view.container.querySelector('[data-testid="team-view"]')).not.toBeNull();
    expect(mounts.count).toBe(1);
    expect(view.container.querySelector('[role="alert"]')?.getAttribute('data-code')).toBe(
      'TIMEOUT',
    );
    answer({ fetching: false, data: member });
    expect(view.container.querySelector('[role="alert"]')).toBeNull();
    expect(mounts.count).toBe(1);
  });

  it('without any answer yet, an error is all it shows, with a way out', () => {
    showing({ fetching: false, data: undefined, error: timedOut });
    expect(view.container.querySelector('[data-testid="team-view"]')).toBeNull();
    expect(view.container.querySelector('[role="alert"]')?.getAttribute('data-code')).toBe(
      'TIMEOUT',
    );
    expect(view.container.querySelector('button')?.textContent).toBe('Sign out');
  });
});
