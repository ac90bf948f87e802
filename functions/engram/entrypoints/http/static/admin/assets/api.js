// The REST client of the panel. Same-origin fetches carry the HttpOnly session cookie; the
// server checks Origin on every state-changing call. Paths are resolved relative to the panel,
// so the panel also works under a path prefix (e.g. an API Gateway stage).

const ROOT = new URL('../', window.location.href);
const listeners = new Set();

export class ApiError extends Error {
  constructor(status, message, code) {
    super(message);
    this.status = status;
    this.code = code;
  }
}

export function onUnauthorized(fn) {
  listeners.add(fn);
}

// ``ifMatch``: the version of the row as the panel shows it; the server answers 409 version_conflict
// when the row changed since (README, "Editing at the same time"), instead of overwriting that change.
export async function api(path, { method = 'GET', body, query, quiet401 = false, ifMatch } = {}) {
  const url = new URL(path.replace(/^\//, ''), ROOT);
  for (const [key, value] of Object.entries(query || {})) {
    if (value === undefined || value === null || value === '') continue;
    for (const v of [value].flat()) url.searchParams.append(key, String(v));
  }
  const init = { method, credentials: 'same-origin', headers: { accept: 'application/json' } };
  if (ifMatch !== undefined && ifMatch !== null) init.headers['if-match'] = `"${ifMatch}"`;
  if (body !== undefined) {
    init.headers['content-type'] = 'application/json';
    init.body = JSON.stringify(body);
  }
  let response;
  try {
    response = await fetch(url, init);
  } catch (err) {
    throw new ApiError(0, 'The server cannot be reached. Check that Engram is running.', 'network');
  }
  const text = await response.text();
  let data = null;
  if (text) {
    try { data = JSON.parse(text); } catch { data = null; }
  }
  if (!response.ok) {
    const message = data?.error?.message || `${response.status} ${response.statusText}`;
    const err = new ApiError(response.status, message, data?.error?.code || '');
    if (response.status === 401 && !quiet401) listeners.forEach((fn) => fn(err));
    throw err;
  }
  return data;
}

export const get = (path, query) => api(path, { query });
export const post = (path, body, opts = {}) => api(path, { method: 'POST', body, ...opts });
export const patch = (path, body, opts = {}) => api(path, { method: 'PATCH', body, ...opts });
export const put = (path, body) => api(path, { method: 'PUT', body });
export const del = (path, opts = {}) => api(path, { method: 'DELETE', ...opts });
