// Settings: the runtime settings that are safe to change, stored server-side, applied without a restart.
import { api, get, put } from '../api.js';
import { button, card, fmtDate, h, toast } from '../dom.js';

function zoneList() {
  const list = h('datalist', { id: 'tz-list' });
  const zones = typeof Intl.supportedValuesOf === 'function' ? Intl.supportedValuesOf('timeZone') : ['UTC'];
  list.append(...['UTC', ...zones].map((z) => h('option', { value: z })));
  return list;
}

// The provider's models for the model fields; a provider that cannot list them leaves free text.
async function modelList(note) {
  const list = h('datalist', { id: 'model-list' });
  try {
    const res = await get('v1/admin/models');
    list.append(...res.items.map((id) => h('option', { value: id })));
    note.textContent = `${res.items.length} models offered by the provider: type in a model field to search them.`;
  } catch (err) {
    note.textContent = `The provider's model list could not be read (${err.message}); type a model name.`;
  }
  return list;
}

function control(item) {
  const attrs = { name: item.name, id: `set-${item.name}`, 'aria-describedby': `help-${item.name}` };
  if (item.kind === 'integer' || item.kind === 'number') {
    return h('input', { ...attrs, type: 'number', step: item.kind === 'integer' ? 1 : 'any', min: item.minimum ?? null, max: item.maximum ?? null, value: item.value ?? '' });
  }
  if (item.kind === 'boolean') return h('input', { ...attrs, type: 'checkbox', checked: item.value });
  if (item.kind === 'timezone') return h('input', { ...attrs, type: 'text', list: 'tz-list', value: item.value ?? '', autocomplete: 'off', spellcheck: 'false' });
  // A model field offers the provider's model list (GET /v1/admin/models): type to search it.
  if (item.group === 'Models') return h('input', { ...attrs, type: 'search', list: 'model-list', value: item.value ?? '', autocomplete: 'off', spellcheck: 'false', placeholder: 'type to search the provider\'s models' });
  return h('input', { ...attrs, type: 'text', value: item.value ?? '', placeholder: item.default ? '' : 'default', spellcheck: 'false' });
}

const read = (item, el) => {
  if (item.kind === 'boolean') return el.checked;
  if (item.kind === 'integer' || item.kind === 'number') return el.value === '' ? null : Number(el.value);
  return el.value.trim();
};

export async function render(root) {
  const data = await get('v1/admin/settings');
  const controls = new Map();
  const save = button('Save changes', null, { kind: 'primary', type: 'submit', disabled: true });
  const status = h('span', { class: 'muted small save-status' });
  const dirty = () => {
    const changed = {};
    for (const item of data.items) {
      const value = read(item, controls.get(item.name));
      if (value !== null && value !== item.value) changed[item.name] = value;
    }
    return changed;
  };
  const refreshState = () => {
    const n = Object.keys(dirty()).length;
    save.disabled = n === 0;
    status.textContent = n ? `${n} unsaved change${n === 1 ? '' : 's'}` : 'No unsaved changes';
  };
  const apply = (res) => {
    data.items = res.items;
    for (const item of res.items) {
      const el = controls.get(item.name);
      if (item.kind === 'boolean') el.checked = item.value; else el.value = item.value ?? '';
      const row = el.closest('.setting');
      row.classList.toggle('overridden', item.overridden);
      row.querySelector('.reset').hidden = !item.overridden;
    }
    refreshState();
  };

  const groups = new Map();
  for (const item of data.items) {
    if (!groups.has(item.group)) groups.set(item.group, []);
    const el = control(item);
    controls.set(item.name, el);
    el.addEventListener('input', refreshState);
    el.addEventListener('change', refreshState);
    const reset = button('Reset', async () => {
      try { apply(await put('v1/admin/settings', { values: { [item.name]: null } })); toast(`${item.label}: back to default`); } catch (err) { toast(err.message, 'error'); }
    }, { kind: 'ghost small reset', title: `Reset ${item.label} to the default` });
    reset.hidden = !item.overridden;
    const defaultText = item.default === '' || item.default === null ? 'not set' : String(item.default);
    groups.get(item.group).push(h('div', { class: `setting${item.overridden ? ' overridden' : ''}`, dataset: { name: item.name } },
      h('label', { for: `set-${item.name}`, class: 'setting-label' }, item.label, h('code', null, item.name)),
      h('div', { class: 'setting-control' }, el, reset),
      h('p', { class: 'field-hint', id: `help-${item.name}` }, item.description, ' ', h('span', { class: 'default' }, `Default: ${defaultText}.`))));
  }

  const modelNote = h('p', { class: 'muted small', id: 'model-list-note' });
  const form = h('form', { class: 'settings-form' },
    zoneList(), await modelList(modelNote),
    [...groups.entries()].map(([group, rows]) => card(group, group === 'Models' ? modelNote : null, rows)),
    h('div', { class: 'savebar' }, status, save));
  form.addEventListener('submit', async (e) => {
    e.preventDefault();
    const values = dirty();
    if (!Object.keys(values).length) return;
    try {
      apply(await put('v1/admin/settings', { values }));
      toast('Saved. Applies from the next request.');
    } catch (err) { toast(err.message, 'error'); }
  });

  refreshState();
  const info = data.info || {};
  const session = await api('admin/session').catch(() => ({}));
  const facts = [
    ['Version', info.version], ['Namespace', info.namespace], ['Store', info.store], ['Search', info.search],
    ['Embedder', info.embedder || 'none (keyword search only)'], ['Index', `${info.index_documents ?? 0} documents, ${info.index_vectors ?? 0} vectors (${info.index_model || 'no model'})`],
    ['Session', session.expires_at ? `until ${fmtDate(session.expires_at)}` : ''],
  ];
  root.append(
    h('header', { class: 'page-head' }, h('div', null, h('h1', null, 'Settings'),
      h('p', { class: 'muted' }, 'Saved in the store and applied without a restart. Everything else (keys, endpoints, storage) comes from the environment.'))),
    form,
    card('About this server', h('dl', { class: 'facts' }, facts.map(([k, v]) => [h('dt', null, k), h('dd', null, v ?? '')]))));
}
