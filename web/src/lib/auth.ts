// The viewer's token, kept in the browser (localStorage) until they sign out.

const KEY = "paigraph.token";
type Listener = () => void;
const listeners = new Set<Listener>();

export function getToken(): string | null {
  try {
    return localStorage.getItem(KEY);
  } catch {
    return null;
  }
}

export function setToken(token: string | null): void {
  if (token && token.trim()) localStorage.setItem(KEY, token.trim());
  else localStorage.removeItem(KEY);
  listeners.forEach((listener) => listener());
}

export function onTokenChange(listener: Listener): () => void {
  listeners.add(listener);
  return () => listeners.delete(listener);
}

export function authHeaders(token: string | null): Record<string, string> {
  return token ? { Authorization: `Bearer ${token}` } : {};
}
