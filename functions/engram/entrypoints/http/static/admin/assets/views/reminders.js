// Reminders (More → Reminders): upcoming, delivered and missed reminders from `GET /v1/reminders`; snooze
// to a new time or cancel (docs/reminders.md). A reminder's text is a text node, never parsed as HTML.
import { get, post } from '../api.js';
import { button, confirmDialog, empty, field, fmtDate, h, openDialog, toast } from '../dom.js';

const VIEWS = [['upcoming', 'Upcoming'], ['delivered', 'Delivered'], ['missed', 'Missed']];
const state = { view: 'upcoming' };

// A datetime-local value (the browser's zone) as an ISO time with its UTC offset, as the API wants.
export function withOffset(local) {
  const when = new Date(local);
  if (Number.isNaN(when.getTime())) return null;
  const minutes = -when.getTimezoneOffset();
  const sign = minutes >= 0 ? '+' : '-';
  const pad = (n) => String(Math.floor(Math.abs(n))).padStart(2, '0');
  return `${local.length === 16 ? `${local}:00` : local}${sign}${pad(minutes / 60)}:${pad(minutes % 60)}`;
}

export async function reminders(root) {
  const list = h('div', { class: 'list', id: 'reminder-list' });
  const tabs = h('div', { class: 'segmented small', role: 'tablist', 'aria-label': 'Which reminders' });
  const load = async () => {
    tabs.replaceChildren(...VIEWS.map(([key, label]) => button(label, async () => { state.view = key; await load(); },
      { kind: key === state.view ? 'primary small' : 'ghost small' })));
    const res = await get('v1/reminders', { status: state.view, limit: 200 });
    list.replaceChildren(...(res.items.length ? res.items.map(row) : [empty(`No ${state.view} reminders.`)]));
  };
  const row = (r) => h('article', { class: 'item reminder', dataset: { id: r.memory_id } },
    h('p', { class: 'content' }, r.content ?? '(the memory is gone)'),
    h('div', { class: 'meta' },
      h('span', { class: 'meta-item time' }, `${r.status === 'delivered' ? 'due' : 'at'} ${fmtDate(r.remind_at)}`),
      r.delivered_at ? h('span', { class: 'meta-item time' }, `delivered ${fmtDate(r.delivered_at)}`) : null),
    h('div', { class: 'actions' },
      button('Snooze…', () => snooze(r), { kind: 'ghost small', iconName: 'history' }),
      r.status === 'pending' ? button('Cancel reminder', async () => {
        if (!await confirmDialog('Cancel this reminder?', 'The memory stays; it will not be reminded of.', { confirm: 'Cancel reminder', danger: true })) return;
        try { await post(`v1/reminders/${encodeURIComponent(r.memory_id)}/cancel`); toast('Reminder cancelled'); await load(); } catch (err) { toast(err.message, 'error'); }
      }, { kind: 'ghost small danger-text', iconName: 'x' }) : null));
  const snooze = async (r) => {
    const until = await openDialog('Snooze reminder', ({ body, footer, close }) => {
      const input = h('input', { type: 'datetime-local', name: 'until', required: true });
      const soon = new Date(Date.now() + 3600 * 1000);
      soon.setMinutes(soon.getMinutes() - soon.getTimezoneOffset());
      input.value = soon.toISOString().slice(0, 16);
      body.append(h('p', { class: 'content' }, r.content ?? ''), field('Remind me at', input, 'Your browser\'s time zone.'));
      footer.append(button('Cancel', () => close(null), { kind: 'ghost' }), button('Snooze', () => close(withOffset(input.value)), { kind: 'primary' }));
    });
    if (!until) return;
    try { await post(`v1/reminders/${encodeURIComponent(r.memory_id)}/snooze`, { until }); toast(`Snoozed to ${fmtDate(until)}`); await load(); } catch (err) { toast(err.message, 'error'); }
  };
  root.append(h('p', { class: 'muted' }, 'Memories with a reminder time: told in the next chat turn once due.'), tabs, list);
  await load();
}
