// More: precious notes, glossary, reminders, usage, what changed (the change journal: changes.js),
// maintenance (jobs, reindex, export, import).
import { api, del, get, patch, post } from '../api.js';
import { button, card, chip, confirmDialog, downloadJson, empty, field, fmtAgo, fmtDate, h, openDialog, toast } from '../dom.js';
import { JOBS, runList, runRow, statusOf, summarize } from './jobs-ui.js';
import { render as changes } from './changes.js';
import { reminders } from './reminders.js';
import { usage } from './usage.js';

const SECTIONS = [['precious', 'Precious'], ['glossary', 'Glossary'], ['reminders', 'Reminders'], ['usage', 'Usage'], ['changes', 'What changed'], ['maintenance', 'Maintenance']];
let pollTimer = null;

export async function render(root, ctx) {
  const current = window.location.hash.split('/')[1] || 'precious';
  const section = SECTIONS.some(([k]) => k === current) ? current : 'precious';
  clearTimeout(pollTimer);
  const tabs = h('nav', { class: 'segmented', 'aria-label': 'More sections' },
    SECTIONS.map(([key, label]) => h('a', { href: `#more/${key}`, class: key === section ? 'active' : '', 'aria-current': key === section ? 'page' : null }, label)));
  const body = h('div', { class: 'section-body' });
  root.append(h('header', { class: 'page-head' }, h('div', null, h('h1', null, 'More'))), tabs, body);
  await { precious, glossary, reminders, usage, changes, maintenance }[section](body, ctx);
}

// -- precious ---------------------------------------------------------------------------------
async function precious(root) {
  const list = h('div', { class: 'list' });
  const content = h('textarea', { rows: 3, name: 'precious', placeholder: 'Words worth keeping exactly as they were said…', maxlength: 20000 });
  const reason = h('input', { type: 'text', name: 'reason', placeholder: 'Why it matters (optional)', maxlength: 1000 });
  const load = async () => {
    const res = await get('v1/precious', { limit: 200 });
    list.replaceChildren(...(res.items.length ? res.items.map(item) : [empty('No precious notes yet.')]));
  };
  const item = (p) => h('article', { class: 'item precious', dataset: { id: p.id } },
    h('blockquote', { class: 'content' }, p.content),
    h('div', { class: 'meta' }, p.reason ? h('span', { class: 'meta-item' }, p.reason) : null,
      (p.tags || []).map((t) => h('span', { class: 'tag' }, `#${t}`)),
      h('span', { class: 'meta-item time', title: fmtDate(p.created_at) }, fmtAgo(p.created_at))),
    h('div', { class: 'actions' }, button('Delete', async () => {
      if (!await confirmDialog('Delete this note?', 'Precious notes are append-only; deleting one is permanent.', { confirm: 'Delete', danger: true })) return;
      try { await del(`v1/precious/${p.id}`); toast('Deleted'); await load(); } catch (err) { toast(err.message, 'error'); }
    }, { kind: 'ghost small danger-text', iconName: 'trash' })));
  const form = h('form', { class: 'card form-card' }, h('h2', { class: 'card-title' }, 'Keep a note verbatim'),
    field('Text', content), field('Reason', reason),
    h('div', { class: 'form-actions' }, button('Add note', null, { kind: 'primary', type: 'submit', iconName: 'plus' })));
  form.addEventListener('submit', async (e) => {
    e.preventDefault();
    if (!content.value.trim()) return;
    try {
      await post('v1/precious', { content: content.value, reason: reason.value.trim() || null });
      content.value = ''; reason.value = '';
      toast('Note kept');
      await load();
    } catch (err) { toast(err.message, 'error'); }
  });
  await load();
  root.append(form, list);
}

// -- glossary ---------------------------------------------------------------------------------
const splitAliases = (text) => text.split(',').map((a) => a.trim()).filter(Boolean);

function termDialog(t) {
  return openDialog(t ? 'Edit term' : 'New term', ({ body, footer, close }) => {
    const term = h('input', { type: 'text', name: 'term', value: t?.term || '', maxlength: 200, required: true });
    const aliases = h('input', { type: 'text', name: 'aliases', value: (t?.aliases || []).join(', '), placeholder: 'comma, separated' });
    const definition = h('textarea', { rows: 4, name: 'definition', maxlength: 2000 });
    definition.value = t?.definition || '';
    const error = h('p', { class: 'form-error', hidden: true, role: 'alert' });
    body.append(field('Term', term), field('Aliases', aliases, 'Other words that mean the same thing.'), field('Definition', definition), error);
    footer.append(button('Cancel', () => close(null), { kind: 'ghost' }), button('Save', async () => {
      const values = { term: term.value.trim(), aliases: splitAliases(aliases.value), definition: definition.value.trim() };
      if (!values.term || !values.definition) { error.textContent = 'Term and definition are required.'; error.hidden = false; return; }
      try { close(t ? await patch(`v1/glossary/${t.id}`, values) : await post('v1/glossary', values)); } catch (err) { error.textContent = err.message; error.hidden = false; }
    }, { kind: 'primary' }));
    setTimeout(() => term.focus(), 0);
  }, { wide: true });
}

async function glossary(root) {
  const list = h('div', { class: 'list glossary' });
  const load = async () => {
    const res = await get('v1/glossary');
    const items = res.items.sort((a, b) => a.term.localeCompare(b.term));
    list.replaceChildren(...(items.length ? items.map(item) : [empty('No terms yet. Add the words only you and your AI use.')]));
  };
  const item = (t) => h('article', { class: 'item term', dataset: { id: t.id } },
    h('div', { class: 'term-head' }, h('h3', null, t.term), (t.aliases || []).map((a) => chip(a, 'alias'))),
    h('p', { class: 'content' }, t.definition),
    h('div', { class: 'actions' },
      button('Edit', async () => { if (await termDialog(t)) { toast('Term saved'); await load(); } }, { kind: 'ghost small', iconName: 'edit' }),
      button('Delete', async () => {
        if (!await confirmDialog(`Delete “${t.term}”?`, 'The term leaves the glossary.', { confirm: 'Delete', danger: true })) return;
        try { await del(`v1/glossary/${t.id}`); toast('Deleted'); await load(); } catch (err) { toast(err.message, 'error'); }
      }, { kind: 'ghost small danger-text', iconName: 'trash' })));
  await load();
  root.append(h('div', { class: 'section-head' },
    h('p', { class: 'muted' }, 'Private words, nicknames and jargon, with what they mean. Recall adds a term when a message uses it.'),
    button('Add term', async () => { if (await termDialog(null)) { toast('Term added'); await load(); } }, { kind: 'primary small', iconName: 'plus' })), list);
}

// -- maintenance ------------------------------------------------------------------------------
async function maintenance(root) {
  const runs = h('ul', { class: 'runs' });
  const loadRuns = async () => {
    try {
      const res = runList(await get('v1/jobs')).slice(0, 8);
      runs.replaceChildren(...(res.length ? res.map(runRow) : [h('li', { class: 'muted' }, 'No job has run yet.')]));
    } catch (err) {
      runs.replaceChildren(h('li', { class: 'muted' }, err.status === 404 ? 'Jobs are not available in this build.' : err.message));
    }
  };
  const jobRows = JOBS.map(([name, label, help]) => {
    const result = h('p', { class: 'job-result muted small', dataset: { job: name } });
    return h('div', { class: 'job-row' },
      h('div', null, h('h3', null, label), h('p', { class: 'muted small' }, help), result),
      button('Run now', async () => {
        result.textContent = 'Running…';
        try {
          const res = await post(`v1/jobs/${name}`, {});
          const status = statusOf(res || {}).replaceAll('_', ' ');
          result.textContent = `${status} · ${summarize(res || {})}`;
          toast(`${label}: ${status}`);
          await loadRuns();
        } catch (err) {
          result.textContent = err.status === 404 ? 'Not available in this build.' : err.message;
          toast(`${label} failed: ${err.message}`, 'error');
        }
      }, { kind: 'small', iconName: 'play' }));
  });

  // Reindex with progress.
  const bar = h('span', { class: 'progress-fill' });
  const progress = h('div', { class: 'progress', role: 'progressbar', 'aria-valuemin': 0, 'aria-valuemax': 100, hidden: true }, bar);
  const progressText = h('p', { class: 'muted small', id: 'reindex-status' });
  const show = (s) => {
    const total = s.total || 0;
    const share = total ? Math.round((s.done / total) * 100) : (s.state === 'done' ? 100 : 0);
    progress.hidden = s.state === 'idle';
    bar.style.width = `${share}%`;
    progress.setAttribute('aria-valuenow', share);
    progress.classList.toggle('failed', s.state === 'error');
    progressText.textContent = {
      idle: 'No reindex has run yet.',
      running: `Reindexing… ${s.done} / ${total || '?'} memories`,
      done: `Done: ${s.done} memories reindexed${s.reset ? ' (the whole index was rebuilt for a new model)' : ''} · ${fmtAgo(s.finished_at)}`,
      error: `Failed after ${s.done} memories: ${s.error}`,
    }[s.state] || s.state;
  };
  let watching = false;
  const poll = async () => {
    try {
      const s = await get('v1/admin/reindex');
      show(s);
      if (s.state === 'running') {
        watching = true;
        if (root.isConnected) pollTimer = setTimeout(poll, 400);
      } else if (watching && s.state === 'done') {
        watching = false;
        toast(`Reindexed ${s.done} memories`);
      }
    } catch (err) { progressText.textContent = err.message; }
  };
  const reindexBtn = button('Reindex vectors', async () => {
    try { show(await post('v1/admin/reindex', {})); watching = true; pollTimer = setTimeout(poll, 300); } catch (err) { toast(err.message, 'error'); }
  }, { kind: 'small', iconName: 'refresh' });

  // Export / import.
  const exportBtn = button('Download export', async () => {
    try {
      const doc = await get('v1/export');
      downloadJson(doc, `engram-export-${new Date().toISOString().slice(0, 10)}.json`);
      toast('Export downloaded');
    } catch (err) { toast(err.message, 'error'); }
  }, { kind: 'small', iconName: 'download' });
  const file = h('input', { type: 'file', accept: 'application/json,.json,text/plain,.txt', name: 'import', 'aria-label': 'File to import' });
  const FORMATS = [
    ['engram', 'Engram export'], ['aelios', 'Aelios memory export'], ['pawwake', 'Pawwake JSON backup'],
    ['mem0', 'mem0 export'], ['text', 'Plain text (one memory a line)'],
  ];
  const format = h('select', { name: 'import-format', 'aria-label': 'Format of the file' },
    ...FORMATS.map(([value, label]) => h('option', { value }, label)));
  const importResult = h('p', { class: 'muted small', id: 'import-result' });
  const runImport = async (dryRun) => {
    const chosen = file.files?.[0];
    if (!chosen) { toast('Choose a file first', 'error'); return; }
    const from = format.value;
    let doc;
    if (from === 'text') doc = await chosen.text();
    else {
      try { doc = JSON.parse(await chosen.text()); } catch { toast('That file is not JSON', 'error'); return; }
    }
    if (!dryRun && !await confirmDialog('Import this file?', `Rows from “${chosen.name}” are added to your memory. Rows you already have are skipped and invalid rows are refused; nothing is overwritten.`, { confirm: 'Import' })) return;
    try {
      const res = await api('v1/import', { method: 'POST', body: doc, query: { from, dry_run: dryRun ? 'true' : undefined } });
      const counted = (counts) => Object.entries(counts || {}).filter(([, v]) => v).map(([k, v]) => `${v} ${k.replace('_', ' ')}`).join(', ') || 'nothing';
      const refused = (res.problems || []).filter((p) => p.outcome === 'refused');
      const dropped = Object.entries(res.dropped_fields || {}).map(([k, v]) => `${k} (${v})`).join(', ');
      importResult.replaceChildren(
        h('span', {}, `${dryRun ? 'Dry run, nothing written. Would create' : 'Created'}: ${counted(res.created)}. Skipped (already present): ${counted(res.skipped)}. Refused: ${counted(res.refused)}.`),
        ...refused.slice(0, 20).map((p) => h('span', { class: 'import-problem' }, `${p.source || `${p.kind} row ${p.row + 1}`}${p.id ? ` (${p.id})` : ''}: ${p.reason}`)),
        ...(dropped ? [h('span', { class: 'import-problem' }, `Fields Engram has no place for: ${dropped}`)] : []),
      );
      if (!dryRun) toast(refused.length ? 'Import finished; some rows were refused' : 'Import finished', refused.length ? 'error' : undefined);
    } catch (err) { importResult.textContent = err.message; toast(err.message, 'error'); }
  };
  const checkBtn = button('Dry run', () => runImport(true), { kind: 'small', iconName: 'check' });
  const importBtn = button('Import', () => runImport(false), { kind: 'small', iconName: 'upload' });

  root.append(
    h('div', { class: 'grid' },
      card('Run jobs now', h('div', { class: 'jobs' }, jobRows), h('h3', { class: 'subhead' }, 'Recent runs'), runs),
      h('div', { class: 'stack' },
        card('Search index', h('p', { class: 'muted small' }, 'Re-embeds and re-indexes every active memory. Needed after changing the embedding model; safe any time.'),
          h('div', { class: 'form-actions' }, reindexBtn), progress, progressText),
        card('Export', h('p', { class: 'muted small' }, 'Every row of your memory as one JSON file (the format Import takes).'),
          h('div', { class: 'form-actions' }, exportBtn)),
        card('Import', h('p', { class: 'muted small' }, 'Add the rows of an Engram export, or move in from Aelios, Pawwake, mem0 or a text file. A dry run shows what would happen first.'),
          h('div', { class: 'import-row' }, format, file, checkBtn, importBtn), importResult))));
  await Promise.all([loadRuns(), poll()]);
}
