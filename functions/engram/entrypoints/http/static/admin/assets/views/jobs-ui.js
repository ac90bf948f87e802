// Rendering of job runs: `POST /v1/jobs/{extract|dream|cleanup}` returns a report and
// `GET /v1/jobs` lists recorded runs ({job, at, ...counts, errors, namespaces}).
import { chip, fmtAgo, fmtDate, h } from '../dom.js';

export const JOBS = [
  ['extract', 'Extraction', 'Turns new chat messages into memories or review candidates.'],
  ['dream', 'Dreaming', 'Consolidates yesterday: merges duplicates, rewrites the digest and the daily log.'],
  ['cleanup', 'Cleanup', 'Retention: expires old rows and hard-deletes what was removed 30 days ago.'],
];
const SKIP = new Set(['job', 'at', 'status', 'state', 'namespace', 'date', 'errors', 'finished_at', 'started_at']);

export function runList(body) {
  if (Array.isArray(body)) return body;
  return body?.runs || body?.items || [];
}

function errorsOf(run) {
  const nsErrors = (run.namespaces || []).flatMap((ns) => ns.errors || []);
  if (Array.isArray(run.errors)) return [...run.errors, ...nsErrors];
  return nsErrors.length ? nsErrors : Array.from({ length: Number(run.errors || 0) }, () => ({}));
}

export function statusOf(run) {
  const explicit = run.status || run.state || (run.namespaces || []).map((ns) => ns.status).find(Boolean);
  if (explicit) return String(explicit);
  return errorsOf(run).length ? 'failed' : 'done';
}

export function summarize(run) {
  const parts = Object.entries(run)
    .filter(([k, v]) => !SKIP.has(k) && typeof v === 'number' && v > 0)
    .map(([k, v]) => `${v} ${k.replaceAll('_', ' ')}`);
  const errors = errorsOf(run);
  if (errors.length) {
    const first = errors[0];
    parts.push(`${errors.length} error${errors.length === 1 ? '' : 's'}${first?.error ? ` (${first.error})` : ''}`);
  }
  if (run.date) parts.unshift(`day ${run.date}`);
  return parts.length ? parts.join(' · ') : 'nothing to do';
}

export function runRow(run) {
  const status = statusOf(run);
  const when = run.at || run.finished_at || run.started_at;
  const kind = /fail|error/i.test(status) ? 'bad' : /run|queue|pend|start/i.test(status) ? 'warn' : 'good';
  return h('li', { class: 'run' },
    h('span', { class: 'run-name' }, run.job || 'job'),
    chip(status.replaceAll('_', ' '), `status ${kind}`),
    h('span', { class: 'muted run-summary', title: summarize(run) }, summarize(run)),
    h('span', { class: 'muted run-time', title: fmtDate(when) }, fmtAgo(when)));
}
