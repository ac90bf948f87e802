// Review: pending candidates; approve, discard, merge into or supersede a chosen memory.
import { get, post } from '../api.js';
import { append, button, chip, empty, fmtAgo, fmtDate, h, pct, toast } from '../dom.js';
import { memoryMeta, pickMemory } from './memory-ui.js';

function confidence(value) {
  const level = value >= 0.7 ? 'high' : value >= 0.4 ? 'mid' : 'low';
  const fill = h('span', { class: 'meter-fill' });
  fill.style.width = pct(value);
  return h('span', { class: `meter ${level}`, title: `confidence ${pct(value)}` },
    h('span', { class: 'meter-track' }, fill), h('span', { class: 'meter-value' }, `${pct(value)} confident`));
}

function candidateCard(c, { onDone }) {
  const el = h('article', { class: 'item candidate', dataset: { id: c.id } });
  const text = h('p', { class: 'content' }, c.content);
  const editor = h('textarea', { rows: 3, class: 'inline-edit', hidden: true, 'aria-label': 'Candidate text' });
  editor.value = c.content;
  const edited = () => (!editor.hidden && editor.value.trim() && editor.value.trim() !== c.content ? editor.value.trim() : null);

  const decide = async (decision, body, message) => {
    try {
      await post(`v1/candidates/${c.id}/${decision}`, body);
      toast(message);
      el.classList.add('leaving');
      setTimeout(() => { el.remove(); onDone(); }, 180);
    } catch (err) { toast(err.message, 'error'); }
  };

  const target = c.target_memory_id ? h('div', { class: 'related' }, h('span', { class: 'muted small' }, 'Related memory…')) : null;
  if (target) {
    get(`v1/memories/${c.target_memory_id}`).then((m) => target.replaceChildren(
      h('span', { class: 'muted small' }, 'Related memory'), h('p', { class: 'content' }, m.content), memoryMeta(m),
    )).catch(() => target.remove());
  }

  append(el, [
    text, editor,
    h('div', { class: 'meta' },
      chip(c.type, `type t-${c.type}`),
      confidence(c.confidence),
      c.fact_key ? h('code', { class: 'meta-item key' }, c.fact_key) : null,
      h('span', { class: 'meta-item' }, `from ${c.source}`),
      c.source_message_ids?.length ? h('span', { class: 'meta-item' }, `${c.source_message_ids.length} message(s)`) : null,
      (c.tags || []).map((t) => h('span', { class: 'tag' }, `#${t}`)),
      h('span', { class: 'meta-item time', title: fmtDate(c.created_at) }, fmtAgo(c.created_at))),
    target,
    h('div', { class: 'actions' },
      button('Approve', () => decide('approve', { content: edited() }, 'Approved: saved as a memory'), { kind: 'primary small', iconName: 'check' }),
      button('Merge into…', async () => {
        const pick = await pickMemory('Merge into a memory', {
          query: c.content, confirm: 'Merge',
          help: 'The chosen memory absorbs this candidate. With text below, it gets a new version with that text.',
          withContent: edited() || '',
        });
        if (pick) await decide('merge', { target_id: pick.memory.id, content: pick.content || null }, 'Merged');
      }, { kind: 'small', iconName: 'merge' }),
      button('Supersede…', async () => {
        const pick = await pickMemory('Supersede a memory', {
          query: c.content, confirm: 'Supersede',
          help: 'The chosen memory becomes an older version; this candidate becomes the current one.',
        });
        if (pick) await decide('supersede', { target_id: pick.memory.id, content: edited() }, 'Superseded');
      }, { kind: 'small', iconName: 'replace' }),
      button('Edit text', () => {
        editor.hidden = !editor.hidden;
        text.hidden = !editor.hidden;
        if (!editor.hidden) editor.focus();
      }, { kind: 'ghost small', iconName: 'edit' }),
      button('Discard', () => decide('discard', {}, 'Discarded'), { kind: 'ghost small danger-text', iconName: 'x' })),
  ]);
  return el;
}

export async function render(root, ctx) {
  let cursor = null;
  const list = h('div', { class: 'list' });
  const count = h('span', { class: 'count' });
  const more = h('div', { class: 'more-row' });
  let shown = 0;
  const updateCount = () => {
    shown = list.querySelectorAll('.candidate').length;
    count.textContent = shown ? `${shown}${cursor ? '+' : ''} pending` : '';
    if (!shown && !cursor) list.replaceChildren(empty('Nothing to review. Extraction puts low-confidence memories here.'));
  };
  const onDone = async () => {
    updateCount();
    try { ctx.setReviewBadge((await get('v1/stats')).pending_candidates || 0); } catch { /* badge only */ }
  };
  const load = async () => {
    const page = await get('v1/candidates', { status: 'pending', limit: 50, cursor });
    cursor = page.next_cursor;
    list.append(...page.items.map((c) => candidateCard(c, { onDone })));
    more.replaceChildren();
    if (cursor) more.append(button('Load more', load, { kind: 'ghost' }));
    updateCount();
  };
  await load();
  root.append(
    h('header', { class: 'page-head' },
      h('div', null, h('h1', null, 'Review queue ', count),
        h('p', { class: 'muted' }, 'Memories the extractor was not sure about. Approve what is true, discard the rest.'))),
    list, more);
}
