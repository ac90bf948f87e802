// Memories: real recall search, filters, edit / pin / archive / delete / restore, version chain.
import { get, post } from '../api.js';
import { button, empty, h, select, spinner, toast } from '../dom.js';
import { LAYERS, STATUSES, TYPES, editDialog, memoryCard } from './memory-ui.js';

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

  const card = (m, score = null) => memoryCard(m, {
    score,
    onChange: (updated) => {
      const old = list.querySelector(`[data-id="${CSS.escape(m.id)}"]`);
      const keep = updated && matches(updated);
      if (old && keep) old.replaceWith(card(updated, score));
      else if (old) old.remove();
      if (!list.querySelector('.memory')) list.replaceChildren(empty('No memories match.'));
    },
  });

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
      button('New memory', async () => {
        const saved = await editDialog(null);
        if (saved) { toast('Memory created'); run(); }
      }, { kind: 'primary small', iconName: 'plus' })),
    form, note, list, more);
  await run();
}
