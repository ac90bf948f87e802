// Small DOM helpers. Every piece of data becomes a text node or an attribute value:
// nothing here parses HTML, so a memory containing markup is shown as the characters it is.

export function h(tag, props, ...children) {
  const el = document.createElement(tag);
  for (const [key, value] of Object.entries(props || {})) {
    if (value === null || value === undefined || value === false) continue;
    if (key === 'class') el.className = value;
    else if (key === 'dataset') Object.assign(el.dataset, value);
    else if (key.startsWith('on')) {
      if (typeof value === 'function') el.addEventListener(key.slice(2).toLowerCase(), value);
    } else if (key === 'value') el.value = value;
    else if (key === 'checked') el.checked = Boolean(value);
    else if (value === true) el.setAttribute(key, '');
    else el.setAttribute(key, String(value));
  }
  append(el, children);
  return el;
}

export function append(el, children) {
  for (const child of [children].flat(Infinity)) {
    if (child === null || child === undefined || child === false) continue;
    el.append(child instanceof Node ? child : document.createTextNode(String(child)));
  }
  return el;
}

const SVG_NS = 'http://www.w3.org/2000/svg';
const ICONS = {
  pin: ['M12 17v5', 'M9 3h6l-1 6 3 3H7l3-3z'],
  edit: ['M4 20h4L19 9l-4-4L4 16z', 'M14 6l4 4'],
  archive: ['M3 5h18v4H3z', 'M5 9v10h14V9', 'M10 13h4'],
  trash: ['M4 7h16', 'M9 7V4h6v3', 'M6 7l1 13h10l1-13'],
  restore: ['M4 12a8 8 0 1 0 2.3-5.7L4 8.6', 'M4 4v4.6h4.6'],
  history: ['M12 7v5l3 2', 'M3 12a9 9 0 1 0 3-6.7L3 8', 'M3 3v5h5'],
  check: ['M5 12l5 5 9-10'],
  x: ['M6 6l12 12', 'M18 6L6 18'],
  merge: ['M6 3v6a6 6 0 0 0 6 6h6', 'M15 12l3 3-3 3', 'M6 21v-4'],
  replace: ['M4 7h13l-3-3', 'M20 17H7l3 3'],
  plus: ['M12 5v14', 'M5 12h14'],
  refresh: ['M20 11a8 8 0 0 0-14.6-4.5L4 8', 'M4 4v4h4', 'M4 13a8 8 0 0 0 14.6 4.5L20 16', 'M20 20v-4h-4'],
  download: ['M12 4v11', 'M7 10l5 5 5-5', 'M5 20h14'],
  upload: ['M12 20V9', 'M7 14l5-5 5 5', 'M5 4h14'],
  play: ['M7 4l13 8-13 8z'],
};

export function icon(name) {
  const svg = document.createElementNS(SVG_NS, 'svg');
  svg.setAttribute('viewBox', '0 0 24 24');
  svg.setAttribute('aria-hidden', 'true');
  svg.classList.add('icon');
  for (const d of ICONS[name] || []) {
    const path = document.createElementNS(SVG_NS, 'path');
    path.setAttribute('d', d);
    svg.append(path);
  }
  return svg;
}

export function button(label, onClick, { kind = '', iconName = null, title = null, type = 'button', disabled = false } = {}) {
  const btn = h('button', { type, class: `btn ${kind}`.trim(), title, 'aria-label': title || null, disabled },
    iconName ? icon(iconName) : null, label ? h('span', null, label) : null);
  if (onClick) {
    btn.addEventListener('click', async (event) => {
      if (btn.disabled) return;
      btn.disabled = true;
      btn.classList.add('busy');
      try { await onClick(event); } finally { btn.disabled = false; btn.classList.remove('busy'); }
    });
  }
  return btn;
}

export function chip(text, kind = '') {
  return h('span', { class: `chip ${kind}`.trim() }, text);
}

export function card(title, ...children) {
  return h('section', { class: 'card' }, title ? h('h2', { class: 'card-title' }, title) : null, ...children);
}

export function empty(text) {
  return h('p', { class: 'empty' }, text);
}

export function field(label, control, hint = null) {
  return h('label', { class: 'field' }, h('span', { class: 'field-label' }, label), control,
    hint ? h('span', { class: 'field-hint' }, hint) : null);
}

export function select(options, value) {
  const el = h('select');
  for (const opt of options) {
    const [val, text] = Array.isArray(opt) ? opt : [opt, opt];
    el.append(h('option', { value: val }, text));
  }
  if (value !== undefined) el.value = value;
  return el;
}

export function spinner() {
  return h('div', { class: 'loading' }, h('div', { class: 'spinner' }));
}

// -- toasts ---------------------------------------------------------------------------------
export function toast(message, kind = 'ok') {
  const host = document.getElementById('toasts');
  const el = h('div', { class: `toast ${kind}`, role: kind === 'error' ? 'alert' : 'status' }, message);
  host.append(el);
  setTimeout(() => el.classList.add('leaving'), kind === 'error' ? 5000 : 2600);
  setTimeout(() => el.remove(), kind === 'error' ? 5400 : 3000);
}

// -- dialogs --------------------------------------------------------------------------------
// openDialog resolves with the value passed to close(), or null when dismissed.
export function openDialog(title, build, { wide = false } = {}) {
  return new Promise((resolve) => {
    const dialog = h('dialog', { class: wide ? 'dialog wide' : 'dialog' });
    let result = null;
    const close = (value = null) => { result = value; dialog.close(); };
    const body = h('div', { class: 'dialog-body' });
    const footer = h('div', { class: 'dialog-actions' });
    dialog.append(
      h('header', { class: 'dialog-head' }, h('h2', null, title),
        button('', () => close(null), { kind: 'ghost icon-only', iconName: 'x', title: 'Close' })),
      body, footer);
    build({ body, footer, close, dialog });
    dialog.addEventListener('close', () => { dialog.remove(); resolve(result); });
    document.body.append(dialog);
    dialog.showModal();
  });
}

export function confirmDialog(title, text, { confirm = 'Confirm', danger = false } = {}) {
  return openDialog(title, ({ body, footer, close }) => {
    body.append(h('p', null, text));
    footer.append(button('Cancel', () => close(false), { kind: 'ghost' }),
      button(confirm, () => close(true), { kind: danger ? 'danger' : 'primary' }));
  }).then((v) => v === true);
}

// -- formatting -----------------------------------------------------------------------------
export function fmtDate(iso) {
  if (!iso) return '';
  const d = typeof iso === 'number' ? new Date(iso * 1000) : new Date(iso);
  if (Number.isNaN(d.getTime())) return String(iso);
  return d.toLocaleString(undefined, { year: 'numeric', month: 'short', day: 'numeric', hour: '2-digit', minute: '2-digit' });
}

export function fmtAgo(iso) {
  if (!iso) return '';
  const d = typeof iso === 'number' ? new Date(iso * 1000) : new Date(iso);
  const s = (Date.now() - d.getTime()) / 1000;
  if (Number.isNaN(s)) return String(iso);
  if (s < 60) return 'just now';
  if (s < 3600) return `${Math.floor(s / 60)} min ago`;
  if (s < 86400) return `${Math.floor(s / 3600)} h ago`;
  if (s < 86400 * 14) return `${Math.floor(s / 86400)} d ago`;
  return d.toLocaleDateString();
}

export function pct(x) {
  return `${Math.round(Number(x || 0) * 100)}%`;
}

export function downloadJson(data, filename) {
  const blob = new Blob([JSON.stringify(data, null, 2)], { type: 'application/json' });
  const url = URL.createObjectURL(blob);
  const a = h('a', { href: url, download: filename, hidden: true });
  document.body.append(a);
  a.click();
  a.remove();
  setTimeout(() => URL.revokeObjectURL(url), 1000);
}
