// Shared pieces for memories: the memory card, the edit dialog, the version chain, the picker.
import { del, get, patch, post } from '../api.js';
import { append, button, chip, confirmDialog, empty, field, fmtAgo, fmtDate, h, openDialog, select, spinner, toast } from '../dom.js';

export const TYPES = ['fact', 'preference', 'instruction', 'event', 'task', 'identity', 'persona', 'project',
  'boundary', 'excerpt', 'note', 'relationship', 'skill'];
export const LAYERS = ['fragment', 'event', 'core'];
export const STATUSES = ['active', 'superseded', 'archived', 'deleted', 'expired'];

export function memoryMeta(m, { score = null } = {}) {
  return h('div', { class: 'meta' },
    chip(m.type, `type t-${m.type}`),
    chip(m.layer, 'layer'),
    m.status !== 'active' ? chip(m.status, `status s-${m.status}`) : null,
    m.pinned ? chip('pinned', 'pinned') : null,
    score !== null ? chip(`score ${Number(score).toFixed(3)}`, 'score') : null,
    h('span', { class: 'meta-item', title: 'importance' }, `importance ${Number(m.importance).toFixed(2)}`),
    m.fact_key ? h('code', { class: 'meta-item key' }, m.fact_key) : null,
    (m.tags || []).map((t) => h('span', { class: 'tag' }, `#${t}`)),
    h('span', { class: 'meta-item time', title: fmtDate(m.updated_at) }, fmtAgo(m.updated_at)));
}

// A memory as a card with its actions. ``onChange(updated)`` is called after every change.
export function memoryCard(m, { onChange, score = null } = {}) {
  const el = h('article', { class: `item memory${m.pinned ? ' is-pinned' : ''}`, dataset: { id: m.id } });
  const refresh = (updated) => { if (onChange) onChange(updated); };
  const run = async (fn, done) => {
    try {
      const updated = await fn();
      toast(done);
      refresh(updated);
    } catch (err) {
      if (!(await changedElsewhere(err, m.id, refresh))) toast(err.message, 'error');
    }
  };
  // Every change is sent with the version this card shows: a change made meanwhile is never overwritten.
  const at = { ifMatch: m.version };
  const actions = h('div', { class: 'actions' });
  if (m.status === 'active') {
    actions.append(
      button('Edit', async () => {
        const saved = await editDialog(m);
        if (saved) { toast('Memory saved'); refresh(saved); }
      }, { kind: 'ghost small', iconName: 'edit' }),
      button(m.pinned ? 'Unpin' : 'Pin', () => run(() => patch(`v1/memories/${m.id}`, { pinned: !m.pinned }, at),
        m.pinned ? 'Unpinned' : 'Pinned'), { kind: 'ghost small', iconName: 'pin' }),
    );
  }
  actions.append(button('Versions', () => versionsDialog(m.id, refresh), { kind: 'ghost small', iconName: 'history' }));
  if (m.status === 'active' && (m.source === 'merge' || m.source === 'consolidation')) {
    // A merge can be taken back: its sources return exactly as they were (README, "Curating by hand").
    actions.append(button('Undo merge', async () => {
      if (!await confirmDialog('Undo this merge?', 'The memories it was made of come back exactly as they were, and this one is erased.', { confirm: 'Undo merge' })) return;
      try {
        const res = await post(`v1/memories/${m.id}/unmerge`);
        toast(`Merge undone: ${res.restored.length} memories restored`);
        refresh(null);
      } catch (err) { toast(err.message, 'error'); }
    }, { kind: 'ghost small', iconName: 'restore' }));
  }
  if (m.status === 'active') {
    actions.append(
      button('Archive', () => run(() => post(`v1/memories/${m.id}/archive`, undefined, at), 'Archived'),
        { kind: 'ghost small', iconName: 'archive' }),
      button('Delete', async () => {
        const ok = await confirmDialog('Delete this memory?',
          'It leaves recall now and can be restored for 30 days.', { confirm: 'Delete', danger: true });
        if (ok) await run(() => del(`v1/memories/${m.id}`, at), 'Deleted');
      }, { kind: 'ghost small danger-text', iconName: 'trash' }),
    );
  } else {
    actions.append(button('Restore', () => run(() => post(`v1/memories/${m.id}/restore`, undefined, at), 'Restored'),
      { kind: 'ghost small', iconName: 'restore' }));
  }
  el.append(h('p', { class: 'content' }, m.content), memoryMeta(m, { score }), actions);
  return el;
}

// A 409 version_conflict: the memory changed since the panel showed it. Show the current version
// instead of the error; ``true`` if that is what happened.
async function changedElsewhere(err, memoryId, refresh) {
  if (err.code !== 'version_conflict') return false;
  toast('Changed elsewhere since you opened it: showing the current version. Nothing was overwritten.', 'error');
  try { refresh(await get(`v1/memories/${memoryId}`)); } catch { /* the toast already said it */ }
  return true;
}

export function editDialog(memory) {
  const isNew = !memory;
  const m = memory || { content: '', type: 'fact', layer: 'fragment', importance: 0.5, tags: [], fact_key: '', pinned: false };
  return openDialog(isNew ? 'New memory' : 'Edit memory', ({ body, footer, close }) => {
    const content = h('textarea', { rows: 5, required: true, maxlength: 8000, name: 'content' });
    content.value = m.content;
    const type = select(TYPES, m.type);
    const layer = select(LAYERS, m.layer);
    const key = h('input', { type: 'text', value: m.fact_key || '', placeholder: 'category:slug', name: 'fact_key' });
    const importance = h('input', { type: 'number', min: 0, max: 1, step: 0.05, value: m.importance, name: 'importance' });
    const tags = h('input', { type: 'text', value: (m.tags || []).join(', '), placeholder: 'comma, separated', name: 'tags' });
    const pinned = h('input', { type: 'checkbox', checked: m.pinned, name: 'pinned' });
    const error = h('p', { class: 'form-error', hidden: true, role: 'alert' });
    body.append(
      field('Content', content),
      h('div', { class: 'grid-2' }, field('Type', type), field('Layer', layer)),
      h('div', { class: 'grid-2' }, field('Fact key', key, 'Optional. One active memory per key.'),
        field('Importance', importance, '0 to 1')),
      field('Tags', tags),
      h('label', { class: 'check' }, pinned, h('span', null, 'Pinned (always in the boot block)')),
      error);
    footer.append(
      button('Cancel', () => close(null), { kind: 'ghost' }),
      button(isNew ? 'Create' : 'Save', async () => {
        const values = {
          content: content.value.trim(),
          type: type.value,
          layer: layer.value,
          fact_key: key.value.trim() || null,
          importance: Number(importance.value),
          tags: tags.value.split(',').map((t) => t.trim()).filter(Boolean),
          pinned: pinned.checked,
        };
        if (!values.content) { error.textContent = 'Content is required.'; error.hidden = false; return; }
        try {
          if (isNew) {
            const res = await post('v1/memories', values);
            close(res.memory);
          } else {
            const changes = {};
            for (const [k, v] of Object.entries(values)) {
              const before = k === 'tags' ? (m.tags || []).join(',') : (m[k] ?? null);
              const after = k === 'tags' ? v.join(',') : v;
              if (before !== after) changes[k] = v;
            }
            if (changes.fact_key === null) delete changes.fact_key;
            close(Object.keys(changes).length ? await patch(`v1/memories/${m.id}`, changes, { ifMatch: m.version }) : m);
          }
        } catch (err) {
          error.textContent = err.code === 'version_conflict'
            ? 'This memory was changed elsewhere since you opened it. Close, look at the current version, and edit again.'
            : err.message;
          error.hidden = false;
        }
      }, { kind: 'primary' }));
    setTimeout(() => content.focus(), 0);
  }, { wide: true });
}

export function versionsDialog(memoryId, onChange) {
  return openDialog('Version chain', async ({ body, footer, close }) => {
    footer.append(button('Close', () => close(null), { kind: 'ghost' }));
    const list = h('ol', { class: 'timeline' });
    body.append(h('p', { class: 'muted' }, 'Oldest first. Restoring a version makes it the active one again.'), spinner());
    const load = async () => {
      const [chain, events] = await Promise.all([
        get(`v1/memories/${memoryId}/versions`),
        get(`v1/memories/${memoryId}/events`).catch(() => ({ items: [] })),
      ]);
      list.replaceChildren(...chain.items.map((v) => h('li', { class: `version${v.id === memoryId ? ' current' : ''}` },
        h('p', { class: 'content' }, v.content),
        h('div', { class: 'meta' }, chip(v.status, `status s-${v.status}`), h('span', { class: 'meta-item' }, fmtDate(v.created_at)),
          v.fact_key ? h('code', { class: 'meta-item key' }, v.fact_key) : null,
          v.status !== 'active' ? button('Restore this version', async () => {
            try {
              const restored = await post(`v1/memories/${v.id}/restore`, undefined, { ifMatch: v.version });
              toast('Version restored');
              if (onChange) onChange(restored);
              await load();
            } catch (err) { toast(err.message, 'error'); }
          }, { kind: 'ghost small', iconName: 'restore' }) : null))));
      const history = events.items.length
        ? h('details', { class: 'events' }, h('summary', null, `History (${events.items.length} events)`),
          h('ul', null, events.items.map((e) => h('li', null,
            // A change of the journal (docs/journal.md) names what it did and why; More › What changed has its run.
            h('code', null, e.kind === 'change' ? (e.detail?.op || e.kind) : e.kind), ' · ', fmtDate(e.created_at),
            e.kind === 'change' && e.detail?.reason ? ` · ${e.detail.reason}` : null))))
        : null;
      body.replaceChildren();
      append(body, [h('p', { class: 'muted' }, 'Oldest first. Restoring a version makes it the active one again.'), list, history]);
    };
    try { await load(); } catch (err) { body.replaceChildren(h('p', { class: 'callout error' }, err.message)); }
  }, { wide: true });
}

// A search picker: resolves with the chosen memory, or null.
export function pickMemory(title, { query = '', help = '', confirm = 'Choose', withContent = null } = {}) {
  return openDialog(title, ({ body, footer, close }) => {
    let chosen = null;
    const input = h('input', { type: 'search', value: query, placeholder: 'Search memories…', 'aria-label': 'Search memories' });
    const results = h('div', { class: 'picker-results', role: 'listbox' });
    const text = withContent !== null ? h('textarea', { rows: 3, placeholder: 'Merged text (optional)' }) : null;
    if (text) text.value = withContent;
    const ok = button(confirm, () => close({ memory: chosen, content: text ? text.value.trim() : null }),
      { kind: 'primary', disabled: true });
    const search = async () => {
      const q = input.value.trim();
      if (!q) { results.replaceChildren(empty('Type to search.')); return; }
      results.replaceChildren(spinner());
      try {
        const res = await post('v1/search/memories', { query: q, top_k: 12 });
        if (!res.items.length) { results.replaceChildren(empty('No matching memory.')); return; }
        results.replaceChildren(...res.items.map(({ memory }) => {
          const row = h('button', { type: 'button', class: 'pick', role: 'option', 'aria-selected': 'false' },
            h('span', { class: 'content' }, memory.content), memoryMeta(memory));
          row.addEventListener('click', () => {
            chosen = memory;
            for (const r of results.querySelectorAll('.pick')) r.setAttribute('aria-selected', 'false');
            row.setAttribute('aria-selected', 'true');
            ok.disabled = false;
          });
          return row;
        }));
      } catch (err) { results.replaceChildren(h('p', { class: 'callout error' }, err.message)); }
    };
    let timer = null;
    input.addEventListener('input', () => { clearTimeout(timer); timer = setTimeout(search, 250); });
    input.addEventListener('keydown', (e) => { if (e.key === 'Enter') { e.preventDefault(); search(); } });
    append(body, [help ? h('p', { class: 'muted' }, help) : null, input, results,
      text ? field('Text of the merged memory', text, 'Leave empty to keep the chosen memory as it is.') : null]);
    footer.append(button('Cancel', () => close(null), { kind: 'ghost' }), ok);
    search();
    setTimeout(() => input.focus(), 0);
  }, { wide: true });
}
