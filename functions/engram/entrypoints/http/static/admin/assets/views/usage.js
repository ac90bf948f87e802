// Usage (More → Usage): tokens per model, per day and per conversation from `GET /v1/usage` (what the chat
// gateway recorded). Model and thread names are text nodes.
import { get } from '../api.js';
import { card, empty, h } from '../dom.js';

const number = (n) => Number(n || 0).toLocaleString();
const tokens = (r) => (r.input_tokens || 0) + (r.output_tokens || 0);

function table(id, head, rows, cells) {
  return h('div', { class: 'table-wrap' }, h('table', { class: 'usage-table', id },
    h('thead', null, h('tr', null, head.map((c) => h('th', { scope: 'col' }, c)))),
    h('tbody', null, rows.map((r) => h('tr', null, cells(r).map((c) => h('td', null, c)))))));
}

// A bar sized through the CSSOM (the panel's CSP allows no inline style attribute).
function bar(share) {
  const el = h('span', { class: 'bar-cell', 'aria-hidden': 'true' });
  el.style.width = `${Math.round(share * 120)}px`;
  return el;
}

export async function usage(root) {
  const days = h('select', { name: 'days', 'aria-label': 'Period' },
    [7, 30, 90, 365].map((d) => h('option', { value: d }, `Last ${d} days`)));
  days.value = '30';
  const body = h('div', { class: 'stack' });
  const load = async () => {
    const res = await get('v1/usage', { days: days.value });
    if (!res.models.length) { body.replaceChildren(empty('No chat usage recorded in this period.')); return; }
    const most = Math.max(...res.daily.map(tokens), 1);
    body.replaceChildren(
      card('Per model', table('usage-models', ['Model', 'Requests', 'Input', 'Output', 'Cache read', 'Cache write'], res.models,
        (r) => [r.model, number(r.requests), number(r.input_tokens), number(r.output_tokens), number(r.cache_read_tokens), number(r.cache_write_tokens)])),
      card('Per day', table('usage-days', ['Day (UTC)', 'Requests', 'Tokens', ''], res.daily,
        (r) => [r.date, number(r.requests), number(tokens(r)), bar(tokens(r) / most)])),
      card('Per conversation', table('usage-threads', ['Conversation', 'Requests', 'Input', 'Output'], res.threads,
        (r) => [r.thread ?? '(not recorded)', number(r.requests), number(r.input_tokens), number(r.output_tokens)])),
      card('Per day and model', table('usage-day-models', ['Day (UTC)', 'Model', 'Input', 'Output'], res.per_day,
        (r) => [r.date, r.model, number(r.input_tokens), number(r.output_tokens)])));
  };
  days.addEventListener('change', () => load());
  root.append(h('p', { class: 'muted' }, 'Tokens the chat gateway recorded, per model, per day and per conversation.'), days, body);
  await load();
}
