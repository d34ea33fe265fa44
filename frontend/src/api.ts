// The plugin's HTTP routes (docs/api.md), relative to this module's folder
// (/data/plugin/kineto_insights/). Span routes answer 202 while the trace is read; the
// page asks again with `wait` (the server answers as soon as it is ready) and reports
// the progress it is given.

import type { PendingAnswer } from "./answers";

let base = "";

export function setApiBase(url: string): void {
  base = url;
}

export function apiUrl(route: string, params: Record<string, string | number | undefined> = {}): string {
  const url = new URL(route, base);
  for (const [key, value] of Object.entries(params)) {
    if (value !== undefined) url.searchParams.set(key, String(value));
  }
  return url.href;
}

export interface Answer<T> {
  ok: boolean;
  status: number;
  body: T | null;
  error: string | null;
}

export async function getJson<T>(url: string, signal?: AbortSignal): Promise<Answer<T>> {
  let response: Response;
  try {
    response = await fetch(url, { headers: { Accept: "application/json" }, signal, credentials: "same-origin" });
  } catch (err) {
    if (signal?.aborted) throw err;
    return { ok: false, status: 0, body: null, error: `The request failed: ${String(err)}` };
  }
  let body: unknown = null;
  try {
    body = await response.json();
  } catch {
    return { ok: false, status: response.status, body: null, error: `HTTP ${response.status}: the answer is not JSON` };
  }
  if (response.ok) return { ok: true, status: response.status, body: body as T, error: null };
  const message = (body as { error?: unknown } | null)?.error;
  return {
    ok: false,
    status: response.status,
    body: body as T,
    error: typeof message === "string" ? message : `HTTP ${response.status}`,
  };
}

export class Cancelled extends Error {}

// GET a span route until it is no longer 202; `onPending` sees each 202 body.
export async function getReady<T>(
  route: string,
  params: Record<string, string | number | undefined>,
  signal: AbortSignal,
  onPending: (pending: PendingAnswer) => void,
): Promise<Answer<T>> {
  for (;;) {
    if (signal.aborted) throw new Cancelled();
    const answer = await getJson<T | PendingAnswer>(apiUrl(route, { ...params, wait: 2 }), signal);
    if (signal.aborted) throw new Cancelled();
    if (answer.status !== 202) return answer as Answer<T>;
    onPending((answer.body ?? {}) as PendingAnswer);
    // `wait` already paced the loop; a short pause keeps a fast 202 from spinning.
    await new Promise((resolve) => setTimeout(resolve, 250));
  }
}
