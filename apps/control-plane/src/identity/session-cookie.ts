/**
 * The cookies of sign-in: the session's secret (HttpOnly, so the portal's scripts never see
 * it; SameSite=Lax, so another site's forms and scripts never send it) and, for the ten minutes
 * a sign-in may take, its flow (sealed with the secrets key).
 */
export const SESSION_COOKIE = 'gpushards_session';
export const FLOW_COOKIE = 'gpushards_signin';
export const FLOW_SECONDS = 600;

/** The cookies of a Cookie header, by name (the first of a name wins). */
export function parseCookies(header: string | undefined): Map<string, string> {
  const cookies = new Map<string, string>();
  for (const part of (header ?? '').split(';')) {
    const eq = part.indexOf('=');
    if (eq < 0) continue;
    const name = part.slice(0, eq).trim();
    if (name === '' || cookies.has(name)) continue;
    try {
      cookies.set(name, decodeURIComponent(part.slice(eq + 1).trim()));
    } catch {
      // A value that is not valid percent-encoding is not one of ours.
    }
  }
  return cookies;
}

export interface CookieOptions {
  readonly maxAgeSeconds: number;
  readonly path: string;
  readonly secure: boolean;
}

export function setCookie(name: string, value: string, options: CookieOptions): string {
  return [
    `${name}=${encodeURIComponent(value)}`,
    `Max-Age=${options.maxAgeSeconds}`,
    `Path=${options.path}`,
    'HttpOnly',
    'SameSite=Lax',
    ...(options.secure ? ['Secure'] : []),
  ].join('; ');
}

export function clearCookie(name: string, path: string, secure: boolean): string {
  return setCookie(name, '', { maxAgeSeconds: 0, path, secure });
}

/**
 * The Authorization value a request signed in by cookie stands for ("Session gpss_…"), for
 * AuthService; undefined without the cookie. `origin`, when given, must be the public URL's
 * origin: a WebSocket opened by another site's page carries the cookie too.
 */
export function sessionAuthorization(
  cookieHeader: string | undefined,
  origin?: { readonly sent: string | undefined; readonly expected: string },
): string | undefined {
  const secret = parseCookies(cookieHeader).get(SESSION_COOKIE);
  if (secret === undefined) return undefined;
  if (origin !== undefined && origin.sent !== origin.expected) return undefined;
  return `Session ${secret}`;
}
