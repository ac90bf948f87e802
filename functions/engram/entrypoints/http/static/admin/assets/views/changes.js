// What changed: the change journal (docs/journal.md). Every run — a job, an import, a hand edit, a
// merge, an undo — with its counts; per run, each change as a diff of the row, and an undo (with a
// confirmation) whose own undo redoes it. Every value is rendered as text (dom.js).
import { get, post } from '../api.js';
import { button, chip, confirmDialog, empty, fmtAgo, fmtDate, h, toast } from '../dom.js';

const KINDS = {
  'job.extract': 'Extraction', 'job.dream': 'Dreaming', 'job.cleanup': 'Cleanup', 'job.history': 'History rotation',
  import: 'Import', edit: 'Edit', merge: 'Merge', undo: 'Undo',
};
const ROWS = {
  memory: 'Memory', candidate: 'Review candidate', thread: 'Thread', summary: 'Thread summary', reminder: 'Reminder',
  precious: 'Precious note', glossary: 'Glossary term', digest: 'Digest', daily_log: 'Daily log',
};
// Fields a change is not about (bookkeeping), left out of a diff.
const QUIET = new Set(['id', 'namespace', 'version', 'index_ref', 'seen_count', 'last_seen_at', 'recall_count',
  'last_injected_at', 'updated_at', 'created_at', 'status_changed_at', 'lease_owner', 'lease_until']);

export function runLabel(run) {
  const base = KINDS[run.kind] || String(run.kind || 'Run').replace(/^job\./, '');
  return run.kind === 'edit' && run.source ? `${base} (${run.source})` : base;
}

function countChips(changes) {
  return Object.entries(changes || {}).map(([key, n]) => {
    const [row, op] = String(key).split('.');
    return chip(`${n} ${(ROWS[row] || row).toLowerCase()} ${op || ''}`.trim());
  });
}

export async function render(root) {
  const list = h('div', { class: 'list runs-list' });
  const more = h('div', { class: 'form-actions' });
  let cursor = null;
  const load = async (reset = false) => {
    const page = await get('v1/runs', { limit: 20, ...(cursor && !reset ? { cursor } : {}) });
    const rows = page.items.map((run) => runCard(run, () => load(true)));
    if (reset || !cursor) list.replaceChildren(...(rows.length ? rows : [empty('Nothing has changed yet.')]));
    else list.append(...rows);
    cursor = page.next_cursor;
    more.replaceChildren(cursor ? button('Older runs', () => load(false), { kind: 'ghost' }) : '');
  };
  root.append(h('p', { class: 'muted' },
    'Every change a job, an import or an edit made, newest first. Undo takes a run back; ',
    'a row changed again since is left as it is. Undoing an undo redoes it.'), list, more);
  cursor = null;
  await load(true);
}

function runCard(run, reload) {
  const changes = h('div', { class: 'changes', hidden: true });
  let loaded = false;
  let changesCursor = null;
  const moreChanges = h('div', { class: 'form-actions' });
  const loadChanges = async () => {
    const page = await get(`v1/runs/${encodeURIComponent(run.id)}/changes`, { limit: 50, ...(changesCursor ? { cursor: changesCursor } : {}) });
    changes.append(...page.items.map(changeItem));
    if (!page.items.length && !changesCursor) changes.append(empty('No changes are kept for this run.'));
    changesCursor = page.next_cursor;
    moreChanges.replaceChildren(changesCursor ? button('More changes', loadChanges, { kind: 'ghost small' }) : '');
  };
  const toggle = button('Show changes', async () => {
    if (!loaded) { await loadChanges(); loaded = true; }
    changes.hidden = !changes.hidden;
    moreChanges.hidden = changes.hidden;
    toggle.querySelector('span').textContent = changes.hidden ? 'Show changes' : 'Hide changes';
  }, { kind: 'ghost small', iconName: 'history' });
  const undo = button(run.kind === 'undo' ? 'Redo' : 'Undo', async () => {
    const what = run.kind === 'undo' ? 'Redo what this undo took back?' : 'Undo this run?';
    const text = `${run.changed} change${run.changed === 1 ? '' : 's'} of "${runLabel(run)}" will be reverted. `
      + 'Anything changed again since is left as it is and listed.';
    if (!await confirmDialog(what, text, { confirm: run.kind === 'undo' ? 'Redo' : 'Undo', danger: true })) return;
    try {
      const result = await post(`v1/runs/${encodeURIComponent(run.id)}/undo`, {});
      const left = result.conflicts.length + result.skipped.length;
      toast(`Reverted ${result.reverted}${left ? `; ${left} left as they are` : ''}`, left ? 'error' : 'ok');
      await reload();
    } catch (err) { toast(err.message, 'error'); }
  }, { kind: 'ghost small danger-text', iconName: 'restore' });
  const detail = run.undoes ? h('span', { class: 'meta-item' }, `undoes ${run.undoes}`)
    : run.detail?.route ? h('span', { class: 'meta-item' }, run.detail.route)
      : run.detail?.tool ? h('span', { class: 'meta-item' }, run.detail.tool) : null;
  return h('article', { class: 'item run-card', dataset: { id: run.id, kind: run.kind } },
    h('div', { class: 'run-head' }, h('strong', { class: 'run-kind' }, runLabel(run)),
      h('span', { class: 'muted run-time', title: fmtDate(run.at) }, fmtAgo(run.at)),
      chip(`${run.changed} change${run.changed === 1 ? '' : 's'}`, run.changed ? 'status warn' : '')),
    h('div', { class: 'meta' }, countChips(run.changes), detail),
    h('div', { class: 'actions' }, toggle, run.changed ? undo : null),
    changes, moreChanges);
}

function title(row, change) {
  const value = change.after || change.before || {};
  const name = value.content || value.term || value.title || value.summary || value.date || change.row_id || '';
  return `${ROWS[row] || row}: ${String(name).slice(0, 80)}`;
}

function changeItem(change) {
  return h('section', { class: 'change', dataset: { row: change.row, op: change.op, id: change.row_id } },
    h('header', { class: 'change-head' }, chip(change.op || ''), h('span', { class: 'change-title' }, title(change.row, change)),
      h('span', { class: 'muted' }, change.row_id || '')),
    change.reason ? h('p', { class: 'change-reason' }, h('span', { class: 'muted' }, 'Why: '), change.reason) : null,
    diff(change.before, change.after));
}

function show(value) {
  if (value === null || value === undefined) return '—';
  if (typeof value === 'object') return JSON.stringify(value);
  return String(value);
}

// The fields that differ, each as before -> after; text fields word by word.
export function diff(before, after) {
  if (!before && !after) return h('p', { class: 'muted' }, 'Erased for good: nothing of it is kept.');
  const keys = [...new Set([...Object.keys(before || {}), ...Object.keys(after || {})])].filter((k) => !QUIET.has(k));
  const rows = [];
  for (const key of keys) {
    const a = before ? before[key] : undefined;
    const b = after ? after[key] : undefined;
    if (before && after && show(a) === show(b)) continue;
    if (!before && (b === null || b === undefined || (Array.isArray(b) && !b.length))) continue;
    rows.push(h('div', { class: 'diff-row' }, h('span', { class: 'diff-key' }, key),
      typeof a === 'string' && typeof b === 'string' ? words(a, b)
        : h('span', { class: 'diff-values' },
          before ? h('del', null, show(a)) : null, before && after ? ' → ' : null, after ? h('ins', null, show(b)) : null)));
  }
  return h('div', { class: 'diff' }, rows.length ? rows : h('p', { class: 'muted' }, 'No visible field changed.'));
}

// A word diff of two texts (longest common subsequence; long texts are shown whole, before and after).
function words(a, b) {
  const x = a.split(/(\s+)/);
  const y = b.split(/(\s+)/);
  if (x.length * y.length > 250000) return h('span', { class: 'diff-values' }, h('del', null, a), ' → ', h('ins', null, b));
  const m = x.length;
  const n = y.length;
  const table = Array.from({ length: m + 1 }, () => new Uint16Array(n + 1));
  for (let i = m - 1; i >= 0; i -= 1) {
    for (let j = n - 1; j >= 0; j -= 1) {
      table[i][j] = x[i] === y[j] ? table[i + 1][j + 1] + 1 : Math.max(table[i + 1][j], table[i][j + 1]);
    }
  }
  const out = [];
  let i = 0;
  let j = 0;
  while (i < m || j < n) {
    if (i < m && j < n && x[i] === y[j]) { out.push(x[i]); i += 1; j += 1; }
    else if (i < m && (j === n || table[i + 1][j] >= table[i][j + 1])) { out.push(h('del', null, x[i])); i += 1; }
    else { out.push(h('ins', null, y[j])); j += 1; }
  }
  return h('span', { class: 'diff-values diff-text' }, out);
}
