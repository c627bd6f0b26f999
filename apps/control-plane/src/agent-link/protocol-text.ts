const MAX_TEXT = 4096;

/**
 * Makes any error text fit the protocol's free-text fields (error messages, reasons): no
 * control characters, at most 4096 characters, never empty.
 */
export function protocolText(text: string): string {
  const flat = text.replace(/\p{Cc}+/gu, ' ').trim();
  const bounded = flat.length > MAX_TEXT ? `${flat.slice(0, MAX_TEXT - 1)}…` : flat;
  return bounded === '' ? 'no details' : bounded;
}
