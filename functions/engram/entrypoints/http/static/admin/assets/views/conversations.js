// Conversations: the threads of every client (docs/threads.md) — list, read (oldest first, a page at a
// time), rename, merge into another thread, delete to the recycle bin and restore; read, edit, clear or copy
// the summary of its server-kept history (README, "Server-kept history"); a batch of selected threads
// deleted, restored, erased for good or exported. Message text is inserted as text nodes (dom.js),
// never parsed as HTML.
import { del, get, patch, post, put } from '../api.js';
import { button, card, chip, confirmDialog, downloadJson, empty, field, fmtAgo, fmtDate, h, openDialog, select, toast } from '../dom.js';
import { each, selection } from './batch.js';

const PAGE = 50;
const path = (id, rest = '') => `v1/threads/${encodeURIComponent(id)}${rest}`;
const titleOf = (t) => t.title || t.id;
const plural = (n, word) => `${n} ${word}${n === 1 ? '' : 's'}`;
const state = { bin: false }; // kept across renders: opening a thread re-renders the view

export async function render(root, ctx) {
  const list = h('div', { class: 'list', id: 'thread-list' });
  const more = h('div', { class: 'more-row' });
  const detail = h('div', { class: 'stack', id: 'thread-detail' });
  const bin = h('input', { type: 'checkbox', name: 'deleted', checked: state.bin, 'aria-label': 'Show the recycle bin' });
  let cursor = null;
  const picked = selection({
    id: 'thread-batch',
    noun: { one: 'conversation', plural: 'conversations' },
    actions: [
      { label: 'Delete', iconName: 'trash', run: (rows) => batch(rows.filter((t) => !t.deleted_at), (t) => del(path(t.id)), 'moved to the recycle bin') },
      { label: 'Restore', iconName: 'restore', run: (rows) => batch(rows.filter((t) => t.deleted_at), (t) => post(path(t.id, '/restore')), 'restored') },
      { label: 'Export', iconName: 'download', run: exportThreads },
      { label: 'Erase for good…', iconName: 'trash', kind: 'ghost small danger-text', run: eraseForGood },
    ],
  });
  async function batch(rows, fn, verb) {
    if (!rows.length) { toast('None of the selected conversations can take this.', 'error'); return; }
    await each(rows, fn, (n) => `${plural(n, 'conversation')} ${verb}`);
    picked.clear();
    await load();
  }
  async function eraseForGood(rows) {
    const n = rows.length;
    const ok = await confirmDialog(`Erase ${plural(n, 'conversation')} for good?`,
      `The ${n === 1 ? 'selected conversation and its messages' : `${n} selected conversations and their messages`} will be gone for good: no restore.`,
      { confirm: `Erase ${n}`, danger: true });
    if (!ok) return;
    await batch(rows, async (t) => {
      if (!t.deleted_at) await del(path(t.id));
      await post(path(t.id, '/erase'), { confirm: true });
    }, 'erased for good');
    detail.replaceChildren();
  }
  async function exportThreads(rows) {
    const threads = [];
    for (const t of rows) {
      const messages = [];
      let next;
      do {
        const res = await get(path(t.id, '/messages'), { limit: 200, cursor: next });
        messages.push(...res.items);
        next = res.next_cursor;
      } while (next);
      threads.push({ ...t, messages });
    }
    downloadJson({ threads }, 'engram-conversations-selection.json');
    toast(`${plural(rows.length, 'conversation')} exported`);
  }

  async function load(first = true) {
    const res = await get('v1/threads', { deleted: bin.checked ? 'true' : undefined, limit: PAGE, cursor: first ? undefined : cursor });
    if (!ctx.isCurrent()) return;
    cursor = res.next_cursor;
    const rows = (res.items || []).map(row);
    if (first) list.replaceChildren(...(rows.length ? rows : [empty(bin.checked
      ? 'The recycle bin is empty.' : 'No conversations yet. Chat through Engram (or POST /v1/ingest/messages) and they appear here.')]));
    else list.append(...rows);
    more.replaceChildren(cursor ? button('Load more', () => load(false), { kind: 'ghost' }) : '');
  }

  function row(t) {
    return h('article', { class: 'item thread', dataset: { id: t.id } },
      picked.checkbox(t, `conversation ${titleOf(t)}`),
      h('div', { class: 'thread-head' },
        h('strong', { class: 'thread-title' }, titleOf(t)),
        chip(plural(t.message_count, 'message')),
        t.deleted_at ? chip(`deleted ${fmtAgo(t.deleted_at)}`, 'warn') : null),
      h('div', { class: 'meta' },
        t.title ? h('span', { class: 'meta-item key' }, t.id) : null,
        t.last_message_at ? h('span', { class: 'meta-item time', title: fmtDate(t.last_message_at) }, `last message ${fmtAgo(t.last_message_at)}`) : null),
      h('div', { class: 'actions' },
        button('Open', () => { window.location.hash = `conversations/${encodeURIComponent(t.id)}`; }, { kind: 'ghost small' }),
        t.deleted_at ? button('Restore', () => restore(t.id), { kind: 'ghost small', iconName: 'restore' }) : null));
  }

  async function restore(id) {
    try { await post(path(id, '/restore')); toast('Conversation restored'); } catch (err) { toast(err.message, 'error'); return; }
    state.bin = false;
    window.location.hash = `conversations/${encodeURIComponent(id)}`;
  }

  function message(m) {
    return h('article', { class: `item message role-${m.role}`, dataset: { id: m.id } },
      h('div', { class: 'message-head' }, chip(m.role, m.role === 'user' ? 'type' : ''),
        h('span', { class: 'meta-item time', title: fmtDate(m.created_at) }, fmtDate(m.created_at)),
        m.model ? h('span', { class: 'muted small' }, m.model) : null,
        m.error ? chip('no answer', 'bad') : null),
      // A text node: markup in a message is shown as the characters it is.
      h('p', { class: 'content' }, m.content),
      m.error ? h('p', { class: 'muted small' }, m.error) : null);
  }

  async function open(id) {
    let thread;
    try { thread = await get(path(id)); } catch (err) {
      detail.replaceChildren(card(null, h('p', { class: 'callout error' }, err.message)));
      return;
    }
    if (!ctx.isCurrent()) return;
    const messages = h('div', { class: 'list messages', id: 'thread-messages' });
    const older = h('div', { class: 'more-row' });
    let next = null;
    const page = async (first) => {
      const res = await get(path(id, '/messages'), { limit: PAGE, cursor: first ? undefined : next });
      next = res.next_cursor;
      if (first) messages.replaceChildren();
      messages.append(...res.items.map(message));
      if (first && !res.items.length) messages.replaceChildren(empty('No messages in this conversation.'));
      older.replaceChildren(next ? button('Load more', () => page(false), { kind: 'ghost' }) : '');
    };
    const rename = async () => {
      const title = await openDialog('Rename conversation', ({ body, footer, close }) => {
        const input = h('input', { type: 'text', name: 'title', value: thread.title || '', maxlength: 200, placeholder: thread.id });
        body.append(field('Title', input, 'Empty: the conversation is shown by its id.'));
        footer.append(button('Cancel', () => close(null), { kind: 'ghost' }), button('Save', () => close({ value: input.value }), { kind: 'primary' }));
      });
      if (!title) return;
      try { await patch(path(id), { title: title.value.trim() || null }); toast('Renamed'); await load(); await open(id); } catch (err) { toast(err.message, 'error'); }
    };
    const merge = async () => {
      const others = ((await get('v1/threads', { limit: 200 })).items || []).filter((t) => t.id !== id);
      if (!others.length) { toast('There is no other conversation to merge into.', 'error'); return; }
      const into = await openDialog('Merge into another conversation', ({ body, footer, close }) => {
        const pick = select(others.map((t) => [t.id, `${titleOf(t)} (${plural(t.message_count, 'message')})`]));
        pick.setAttribute('aria-label', 'Conversation to merge into');
        body.append(h('p', { class: 'muted' }, `Every message of “${titleOf(thread)}” moves into the conversation you pick; this one is gone afterwards.`),
          field('Merge into', pick));
        footer.append(button('Cancel', () => close(null), { kind: 'ghost' }), button('Merge', () => close(pick.value), { kind: 'primary', iconName: 'merge' }));
      });
      if (!into) return;
      try {
        const res = await post(path(id, '/merge'), { into });
        toast(`${plural(res.moved, 'message')} moved`);
        window.location.hash = `conversations/${encodeURIComponent(into)}`;
      } catch (err) { toast(err.message, 'error'); }
    };
    const summary = async () => {
      let kept;
      try { kept = await get(path(id, '/summary')); } catch (err) { toast(err.message, 'error'); return; }
      const others = ((await get('v1/threads', { limit: 200 })).items || []).filter((t) => t.id !== id);
      const choice = await openDialog('Kept summary', ({ body, footer, close }) => {
        const text = h('textarea', { rows: 8, name: 'summary', maxlength: 50000, placeholder: 'No summary yet.' });
        text.value = kept.summary || '';
        const from = select([['', '—'], ...others.map((t) => [t.id, titleOf(t)])]);
        from.setAttribute('aria-label', 'Copy from conversation');
        body.append(
          h('p', { class: 'muted small' }, 'For clients that send only their newest message: the older turns of this conversation, folded by rotations. '
            + `${plural(kept.rotations || 0, 'rotation')} so far.`),
          field('Summary text', text, 'Edit it, or empty it to clear it.'),
          field('Or copy the summary of', from));
        footer.append(button('Cancel', () => close(null), { kind: 'ghost' }),
          button('Save', () => close(from.value ? { from_thread: from.value } : { summary: text.value }), { kind: 'primary' }));
      });
      if (!choice) return;
      // Each outcome has its own words, so the toast tells which save finished (a copy, a clear, an edit).
      const source = others.find((t) => t.id === choice.from_thread);
      const done = choice.from_thread ? `Summary copied from “${source ? titleOf(source) : choice.from_thread}”`
        : choice.summary.trim() ? 'Summary saved' : 'Summary cleared';
      try { await put(path(id, '/summary'), choice); toast(done); } catch (err) { toast(err.message, 'error'); }
    };
    const remove = async () => {
      if (!await confirmDialog('Delete this conversation?', `“${titleOf(thread)}” goes to the recycle bin, where you can restore it until cleanup erases it (30 days by default).`, { confirm: 'Delete', danger: true })) return;
      try { await del(path(id)); toast('Moved to the recycle bin'); window.location.hash = 'conversations'; } catch (err) { toast(err.message, 'error'); }
    };
    detail.replaceChildren(card(null,
      h('div', { class: 'card-head' }, h('h2', { class: 'card-title', id: 'thread-title' }, titleOf(thread)),
        button('', () => { window.location.hash = 'conversations'; }, { kind: 'ghost icon-only', iconName: 'x', title: 'Close' })),
      h('p', { class: 'muted small' }, `${thread.id} · ${plural(thread.message_count, 'message')}, oldest first`),
      thread.deleted_at ? h('p', { class: 'callout warn' }, `In the recycle bin since ${fmtDate(thread.deleted_at)}.`) : null,
      h('div', { class: 'actions' },
        button('Rename', rename, { kind: 'ghost small', iconName: 'edit' }),
        button('Summary', summary, { kind: 'ghost small' }),
        thread.deleted_at ? button('Restore', () => restore(id), { kind: 'ghost small', iconName: 'restore' }) : [
          button('Merge into…', merge, { kind: 'ghost small', iconName: 'merge' }),
          button('Delete', remove, { kind: 'ghost small danger-text', iconName: 'trash' })]),
      messages, older));
    await page(true);
  }

  bin.addEventListener('change', () => {
    state.bin = bin.checked;
    picked.clear();
    detail.replaceChildren();
    load().catch((err) => toast(err.message, 'error'));
  });
  root.append(
    h('header', { class: 'page-head' },
      h('div', null, h('h1', null, 'Conversations'), h('p', { class: 'muted' }, 'Threads from every client, most recently active first.'))),
    h('div', { class: 'grid' },
      card(null, h('label', { class: 'check' }, bin, ' Recycle bin'), picked.bar, list, more),
      detail));
  await load();
  let selected = window.location.hash.split('/').slice(1).join('/');
  try { selected = decodeURIComponent(selected); } catch { /* a hand-typed hash: use it as it is */ }
  if (selected) {
    await open(selected);
    detail.scrollIntoView?.({ block: 'start' });
  }
}
