// Batch selection for a list of rows (Memories, Conversations): a checkbox on each row, and a bar that
// names the count and offers the actions. Row text is never parsed as HTML (dom.js).
import { button, h, toast } from '../dom.js';

// ``actions``: [{ label, iconName, kind, run(selectedRows) -> Promise }]; ``run`` does the work and
// says what happened. Returns { checkbox(row), clear(), bar }.
export function selection({ id, noun, actions }) {
  const chosen = new Map();
  const count = h('strong', { class: 'batch-count' });
  const bar = h('div', { class: 'batch-bar', id, role: 'region', 'aria-label': `Selected ${noun.plural}`, hidden: true });
  const boxes = new Map();
  const update = () => {
    const n = chosen.size;
    count.textContent = `${n} ${n === 1 ? noun.one : noun.plural} selected`;
    bar.hidden = n === 0;
  };
  const clear = () => {
    chosen.clear();
    for (const box of boxes.values()) box.checked = false;
    update();
  };
  bar.append(count, h('div', { class: 'actions' },
    actions.map((a) => button(a.label, async () => {
      const rows = [...chosen.values()];
      if (!rows.length) return;
      try { await a.run(rows); } catch (err) { toast(err.message, 'error'); }
    }, { kind: a.kind || 'ghost small', iconName: a.iconName || null })),
    button('Clear', clear, { kind: 'ghost small', iconName: 'x' })));
  const checkbox = (row, label) => {
    const box = h('input', { type: 'checkbox', class: 'select-row', 'aria-label': `Select ${label}`, checked: chosen.has(row.id) });
    box.addEventListener('change', () => {
      if (box.checked) chosen.set(row.id, row); else chosen.delete(row.id);
      update();
    });
    boxes.set(row.id, box);
    return box;
  };
  update();
  return { checkbox, clear, bar, size: () => chosen.size };
}

// Run ``fn`` on each row one after the other; a toast says how many succeeded and why the first failed.
export async function each(rows, fn, done) {
  let ok = 0;
  let firstError = null;
  for (const row of rows) {
    try { await fn(row); ok += 1; } catch (err) { firstError = firstError || err; }
  }
  if (firstError) toast(`${done(ok)}; ${rows.length - ok} failed: ${firstError.message}`, 'error');
  else toast(done(ok));
  return ok;
}

export const plural = (n, one, many = `${one}s`) => `${n} ${n === 1 ? one : many}`;
