// Helpers for the portal's component tests (Vitest, jsdom); nothing in the app imports them.
import { act, type ReactNode } from 'react';
import { createRoot, type Root } from 'react-dom/client';

// React flushes effects inside act() only when told it runs in a test environment.
(globalThis as { IS_REACT_ACT_ENVIRONMENT?: boolean }).IS_REACT_ACT_ENVIRONMENT = true;

/**
 * A component rendered into a div appended to the document; rerender() renders another element
 * into the same root (React keeps what matches), unmount() removes both.
 */
export function mount(element: ReactNode): {
  container: HTMLDivElement;
  rerender: (next: ReactNode) => void;
  unmount: () => void;
} {
  const container = document.createElement('div');
  document.body.append(container);
  let root: Root | undefined;
  act(() => {
    root = createRoot(container);
    root.render(element);
  });
  return {
    container,
    rerender: (next) => act(() => root!.render(next)),
    unmount: () => {
      act(() => root!.unmount());
      container.remove();
    },
  };
}

/** Sets a controlled input the way typing does: React hears the input event. */
export function typeInto(input: HTMLInputElement, value: string): void {
  const setter = Object.getOwnPropertyDescriptor(HTMLInputElement.prototype, 'value')!.set!;
  act(() => {
    setter.call(input, value);
    input.dispatchEvent(new Event('input', { bubbles: true }));
  });
}

/** The button whose text is `text`, or a clear failure. */
export function button(container: HTMLElement, text: string): HTMLButtonElement {
  const found = [...container.querySelectorAll('button')].find((b) => b.textContent === text);
  if (!found) throw new Error(`no button "${text}"`);
  return found;
}
