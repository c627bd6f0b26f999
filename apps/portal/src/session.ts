/**
 * The token lives in sessionStorage only: it is gone when the browser tab's session ends, and
 * never written to localStorage or a cookie. Signing out removes it.
 */
const KEY = 'gpushards.portal.token';

export function storedToken(): string | undefined {
  try {
    return sessionStorage.getItem(KEY) ?? undefined;
  } catch {
    return undefined;
  }
}

export function storeToken(token: string): void {
  sessionStorage.setItem(KEY, token);
}

export function clearToken(): void {
  sessionStorage.removeItem(KEY);
}

/** "gps_…" or "Bearer gps_…" as pasted, as the Authorization header value. */
export function authorizationOf(token: string): string {
  const trimmed = token.trim();
  return /^bearer\s/i.test(trimmed) ? trimmed : `Bearer ${trimmed}`;
}
