// Memories: real recall search, filters, edit / pin / archive / delete / restore, version chain; a batch of
// selected memories archived, deleted, restored, erased for good, exported or merged into one
// (README, "Curating by hand"), and the core-memory candidates.
import { del, get, patch, post } from '../api.js';
import { button, chip, confirmDialog, downloadJson, empty, field, h, openDialog, select, spinner, toast } from '../dom.js';
import { each, plural, selection } from './batch.js';
import { LAYERS, STATUSES, TYPES, editDialog, memoryCard, memoryMeta } from './memory-ui.js';

const state = { query: '', type: '', status: 'active', layer: '', tag: '', pinned: false };

export async function render(root) {
  const list = h('div', { class: 'list', id: 'memory-list' });
  const more = h('div', { class: 'more-row' });
  const note = h('p', { class: 'muted small result-note' });
  let cursor = null;

  const query = h('input', { type: 'search', name: 'q', value: state.query, placeholder: 'Search like recall does (keywords + meaning)…', 'aria-label': 'Search memories' });
  const type = select([['', 'All types'], ...TYPES], state.type);
  const status = select([...STATUSES.map((s) => [s, s === 'active' ? 'Active' : s[0].toUpperCase() + s.slice(1)]), ['all', 'Any status']], state.status);
  const layer = select([['', 'All layers'], ...LAYERS], state.layer);
  const tag = h('input', { type: 'text', name: 'tag', value: state.tag, placeholder: 'Tag', 'aria-label': 'Tag', class: 'tag-input' });
  const pinned = h('input', { type: 'checkbox', checked: state.pinned, name: 'pinned' });
  type.setAttribute('aria-label', 'Type');
  status.setAttribute('aria-label', 'Status');
  layer.setAttribute('aria-label', 'Layer');

  const picked = selection({
    id: 'memory-batch',
    noun: { one: 'memory', plural: 'memories' },
    actions: [
      { label: 'Merge…', iconName: 'merge', run: (rows) => mergeDialog(rows, () => { picked.clear(); run(); }) },
      { label: 'Consolidate…', iconName: 'refresh', run: (rows) => consolidateDialog(rows, () => { picked.clear(); run(); }) },
      { label: 'Archive', iconName: 'archive', run: (rows) => batch(rows, (m) => post(`v1/memories/${m.id}/archive`, undefined, { ifMatch: m.version }), 'archived') },
      { label: 'Delete', iconName: 'trash', run: (rows) => batch(rows, (m) => del(`v1/memories/${m.id}`, { ifMatch: m.version }), 'deleted') },
      { label: 'Restore', iconName: 'restore', run: (rows) => batch(rows, (m) => post(`v1/memories/${m.id}/restore`, undefined, { ifMatch: m.version }), 'restored') },
      { label: 'Export', iconName: 'download', run: async (rows) => { downloadJson({ memories: rows }, 'engram-memories-selection.json'); toast(`${plural(rows.length, 'memory', 'memories')} exported`); } },
      { label: 'Erase for good…', iconName: 'trash', kind: 'ghost small danger-text', run: eraseForGood },
    ],
  });
  async function batch(rows, fn, verb) {
    await each(rows, fn, (n) => `${plural(n, 'memory', 'memories')} ${verb}`);
    picked.clear();
    await run();
  }
  async function eraseForGood(rows) {
    const n = rows.length;
    const ok = await confirmDialog(`Erase ${plural(n, 'memory', 'memories')} for good?`,
      `The ${plural(n, 'selected memory', 'selected memories')} will be gone for good: no restore, no undo. Active ones are deleted first.`,
      { confirm: `Erase ${n}`, danger: true });
    if (!ok) return;
    await batch(rows, async (m) => {
      let version = m.version;
      if (m.status === 'active') version = (await del(`v1/memories/${m.id}`, { ifMatch: version })).version;
      await post(`v1/memories/${m.id}/erase`, { confirm: true }, { ifMatch: version });
    }, 'erased for good');
  }

  const card = (m, score = null) => {
    const el = memoryCard(m, {
      score,
      onChange: (updated) => {
        const old = list.querySelector(`[data-id="${CSS.escape(m.id)}"]`);
        const keep = updated && matches(updated);
        if (old && keep) old.replaceWith(card(updated, score));
        else if (old) old.remove();
        if (!list.querySelector('.memory')) list.replaceChildren(empty('No memories match.'));
      },
    });
    el.prepend(picked.checkbox(m, 'memory'));
    return el;
  };

  const matches = (m) => (!state.type || m.type === state.type) && (!state.layer || m.layer === state.layer)
    && (!state.tag || (m.tags || []).includes(state.tag)) && (!state.pinned || m.pinned)
    && (state.query || state.status === 'all' || m.status === state.status);

  const read = () => Object.assign(state, {
    query: query.value.trim(), type: type.value, status: status.value, layer: layer.value,
    tag: tag.value.trim(), pinned: pinned.checked,
  });

  const run = async () => {
    read();
    cursor = null;
    list.replaceChildren(spinner());
    more.replaceChildren();
    try {
      if (state.query) {
        const res = await post('v1/search/memories', { query: state.query, top_k: 50, types: state.type ? [state.type] : [] });
        const hits = res.items.filter(({ memory }) => matches(memory));
        note.textContent = `${hits.length} result${hits.length === 1 ? '' : 's'} from recall (active memories, best first)`;
        list.replaceChildren(...(hits.length ? hits.map(({ memory, score }) => card(memory, score)) : [empty('No memory matches this search.')]));
      } else {
        await page(true);
      }
    } catch (err) {
      list.replaceChildren(h('p', { class: 'callout error' }, err.message));
    }
  };

  const page = async (first) => {
    const res = await get('v1/memories', {
      type: state.type || undefined, status: state.status, layer: state.layer || undefined,
      tag: state.tag || undefined, pinned: state.pinned ? 'true' : undefined, limit: 50, cursor: first ? undefined : cursor,
    });
    cursor = res.next_cursor;
    if (first) list.replaceChildren();
    list.append(...res.items.map((m) => card(m)));
    if (first && !res.items.length) list.replaceChildren(empty('No memories match these filters.'));
    const n = list.querySelectorAll('.memory').length;
    note.textContent = `${n}${cursor ? '+' : ''} ${n === 1 && !cursor ? 'memory' : 'memories'}, newest first`;
    more.replaceChildren();
    if (cursor) more.append(button('Load more', () => page(false), { kind: 'ghost' }));
  };

  const form = h('form', { class: 'toolbar', role: 'search' },
    h('div', { class: 'search-row' }, query, button('Search', null, { kind: 'primary', type: 'submit' })),
    h('div', { class: 'filter-row' }, type, status, layer, tag,
      h('label', { class: 'check' }, pinned, h('span', null, 'Pinned only'))));
  form.addEventListener('submit', (e) => { e.preventDefault(); run(); });
  for (const el of [type, status, layer, pinned]) el.addEventListener('change', run);
  tag.addEventListener('change', run);
  query.addEventListener('search', () => { if (!query.value) run(); });

  root.append(
    h('header', { class: 'page-head' },
      h('div', null, h('h1', null, 'Memories'), h('p', { class: 'muted' }, 'Everything Engram remembers about you.')),
      h('div', { class: 'actions' },
        button('Core candidates', () => coreCandidates(run), { kind: 'ghost small', iconName: 'pin' }),
        button('New memory', async () => {
          const saved = await editDialog(null);
          if (saved) { toast('Memory created'); run(); }
        }, { kind: 'primary small', iconName: 'plus' }))),
    form, picked.bar, note, list, more);
  await run();
}

// Merge the selected memories: the drafted text (the extraction model's, or the texts joined) is edited,
// then confirmed; every source is sent with the version shown, so one changed meanwhile is refused.
async function mergeDialog(rows, done) {
  if (rows.length < 2 || rows.length > 10) { toast('Select 2 to 10 memories to merge.', 'error'); return; }
  if (rows.some((m) => m.status !== 'active')) { toast('Only active memories can be merged.', 'error'); return; }
  const sources = rows.map((m) => ({ id: m.id, version: m.version }));
  const draft = await post('v1/memories/merge/draft', { sources });
  const merged = await openDialog(`Merge ${rows.length} memories`, ({ body, footer, close }) => {
    const text = h('textarea', { rows: 6, name: 'merged', maxlength: 4000, 'aria-label': 'Merged text' });
    text.value = draft.content;
    const type = select(TYPES, draft.type);
    type.setAttribute('aria-label', 'Type');
    const error = h('p', { class: 'form-error', hidden: true, role: 'alert' });
    body.append(
      h('p', { class: 'muted small' }, draft.drafted_by === 'model' ? 'Drafted by the extraction model: edit it before you merge.'
        : `The texts joined${draft.note ? ` (${draft.note})` : ''}: edit them into one.`),
      h('ol', { class: 'merge-sources' }, draft.sources.map((m) => h('li', null, h('p', { class: 'content' }, m.content), memoryMeta(m)))),
      field('Merged text', text), field('Type', type), error);
    footer.append(button('Cancel', () => close(null), { kind: 'ghost' }), button('Merge', async () => {
      if (!text.value.trim()) { error.textContent = 'The merged text is required.'; error.hidden = false; return; }
      try {
        close(await post('v1/memories/merge', { sources, content: text.value.trim(), type: type.value }));
      } catch (err) {
        error.textContent = err.code === 'version_conflict'
          ? 'One of these memories changed since you selected it: nothing was merged. Reload and select again.'
          : err.message;
        error.hidden = false;
      }
    }, { kind: 'primary', iconName: 'merge' }));
  }, { wide: true });
  if (!merged) return;
  toast(`${rows.length} memories merged into one (Undo merge on it takes it back)`);
  done();
}

// Memories recalled or said again often that are not pinned or core: promote with one click.
function coreCandidates(changed) {
  return openDialog('Core-memory candidates', async ({ body, footer, close }) => {
    footer.append(button('Close', () => close(null), { kind: 'ghost' }));
    body.append(spinner());
    const load = async () => {
      const res = await get('v1/memories/core_candidates', { limit: 50 });
      const rows = res.items.map(({ memory, why }) => h('article', { class: 'item memory core-candidate', dataset: { id: memory.id } },
        h('p', { class: 'content' }, memory.content), memoryMeta(memory), h('p', { class: 'muted small' }, chip(why, 'score')),
        h('div', { class: 'actions' },
          button('Make core', () => promote(memory, { layer: 'core' }, 'Moved to the core layer'), { kind: 'ghost small', iconName: 'check' }),
          button('Pin', () => promote(memory, { pinned: true }, 'Pinned'), { kind: 'ghost small', iconName: 'pin' }))));
      body.replaceChildren(h('p', { class: 'muted' }, 'Recalled into chats or said again at least 3 times, neither pinned nor core; the most used first.'),
        ...(rows.length ? rows : [empty('No candidates: nothing is used that often yet.')]));
    };
    const promote = async (memory, change, done) => {
      try { await patch(`v1/memories/${memory.id}`, change, { ifMatch: memory.version }); toast(done); changed(); await load(); } catch (err) { toast(err.message, 'error'); }
    };
    try { await load(); } catch (err) { body.replaceChildren(h('p', { class: 'callout error' }, err.message)); }
  }, { wide: true });
}

// A consolidation draft of the selected memories: the model proposes items (each replacing some of them)
// as a job; each item is edited, kept or dropped here, and nothing changes until "Apply" (README,
// "Curating by hand").
async function consolidateDialog(rows, done) {
  let draft = await post('v1/consolidations', { memory_ids: rows.map((m) => m.id) });
  const applied = await openDialog('Consolidation draft', async ({ body, footer, close }) => {
    const progress = h('p', { class: 'muted', id: 'consolidation-progress', role: 'status' });
    body.append(progress);
    while (draft.state === 'running') {
      progress.textContent = `The model is drafting… ${draft.done} of ${draft.total || '?'} batches`;
      await new Promise((resolve) => { setTimeout(resolve, 400); });
      if (!body.isConnected) return;
      draft = await get(`v1/consolidations/${encodeURIComponent(draft.id)}`);
    }
    if (draft.state !== 'ready') {
      progress.textContent = `The draft stopped: ${draft.note || draft.state}`;
      footer.append(button('Close', () => close(null), { kind: 'ghost' }));
      return;
    }
    progress.textContent = draft.items.length
      ? `${draft.items.length} proposed change${draft.items.length === 1 ? '' : 's'}: edit, keep or drop each; nothing changes until you apply.`
      : 'Nothing to consolidate: these memories are fine as they are.';
    const items = draft.items.map((item) => {
      const keep = h('input', { type: 'checkbox', checked: true, 'aria-label': `Keep item ${item.id}` });
      const text = h('textarea', { rows: 3, maxlength: 4000, 'aria-label': `Text of item ${item.id}` });
      text.value = item.content;
      const el = h('article', { class: 'item consolidation-item', dataset: { id: item.id } },
        h('label', { class: 'check' }, keep, h('span', null, 'Keep this change')),
        text,
        item.reason ? h('p', { class: 'muted small' }, item.reason) : null,
        h('p', { class: 'muted small' }, `Replaces ${item.sources.length}:`),
        h('ul', { class: 'merge-sources' }, item.sources.map((src) => h('li', null, src.memory ? src.memory.content : '(gone)'))));
      return { item, keep, text, el };
    });
    body.append(...items.map((i) => i.el));
    footer.append(
      button('Discard draft', async () => {
        try { await post(`v1/consolidations/${encodeURIComponent(draft.id)}/discard`); close(null); } catch (err) { toast(err.message, 'error'); }
      }, { kind: 'ghost' }),
      button('Apply', async () => {
        const accepted = items.filter((i) => i.keep.checked).map((i) => ({ id: i.item.id, content: i.text.value.trim() || i.item.content }));
        try { close(await post(`v1/consolidations/${encodeURIComponent(draft.id)}/apply`, { items: accepted })); } catch (err) { toast(err.message, 'error'); }
      }, { kind: 'primary', iconName: 'check' }));
  }, { wide: true });
  if (!applied) return;
  const results = applied.results || [];
  const ok = results.filter((r) => r.status === 'applied').length;
  const refused = results.filter((r) => r.status === 'refused');
  toast(`${ok} change${ok === 1 ? '' : 's'} applied${refused.length ? `; ${refused.length} refused: ${refused[0].message}` : ''}`, refused.length ? 'error' : 'ok');
  done();
}
