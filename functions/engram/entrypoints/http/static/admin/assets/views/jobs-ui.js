// Rendering of job runs (the jobs API: POST /v1/jobs/{name}, GET /v1/jobs). Field names are read
// defensively so the panel keeps working while that API grows.
import { chip, fmtAgo, fmtDate, h } from '../dom.js';

export const JOBS = [
  ['extract', 'Extraction', 'Turns new chat messages into memories or review candidates.'],
  ['dream', 'Dreaming', 'Consolidates yesterday: merges duplicates, rewrites the digest and the daily log.'],
  ['cleanup', 'Cleanup', 'Retention: expires old rows and hard-deletes what was removed 30 days ago.'],
];

const pick = (obj, ...names) => names.map((n) => obj?.[n]).find((v) => v !== undefined && v !== null);

export function runList(body) {
  if (Array.isArray(body)) return body;
  return body?.items || body?.runs || body?.jobs || [];
}

export function summarize(run) {
  const detail = pick(run, 'result', 'summary', 'stats', 'detail', 'counts') || {};
  if (typeof detail !== 'object') return String(detail);
  return Object.entries(detail)
    .filter(([, v]) => ['number', 'string', 'boolean'].includes(typeof v))
    .slice(0, 6)
    .map(([k, v]) => `${k.replaceAll('_', ' ')}: ${v}`)
    .join(' · ');
}

export function runRow(run) {
  const name = pick(run, 'job', 'name', 'kind', 'type') || 'job';
  const status = String(pick(run, 'status', 'state', 'outcome') || 'done');
  const when = pick(run, 'finished_at', 'ended_at', 'started_at', 'created_at');
  const kind = /fail|error/i.test(status) ? 'bad' : /run|queue|pend|start/i.test(status) ? 'warn' : 'good';
  const error = pick(run, 'error', 'message');
  return h('li', { class: 'run' },
    h('span', { class: 'run-name' }, name),
    chip(status, `status ${kind}`),
    h('span', { class: 'muted run-summary' }, error && kind === 'bad' ? String(error) : summarize(run)),
    h('span', { class: 'muted run-time', title: fmtDate(when) }, fmtAgo(when)));
}
