const MAX_TEXT = 4096;

/**
 * Makes any error text fit the protocol's free-text fields (reasons, error messages): no
 * control characters, at most `maxLength` (4096) characters, never empty.
 */
export function protocolText(text: string, maxLength = MAX_TEXT): string {
  const flat = text.replace(/\p{Cc}+/gu, ' ').trim();
  const bounded = flat.length > maxLength ? `${flat.slice(0, maxLength - 1)}…` : flat;
  return bounded === '' ? 'no details' : bounded;
}

/** The message of whatever was thrown. */
export function errorMessage(error: unknown): string {
  return error instanceof Error ? error.message : String(error);
}
