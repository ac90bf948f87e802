// Skills: the library (list, deleted ones), a skill's SKILL.md shown as text (never HTML), its
// versions (read any, restore one as the newest), allocation to agents, delete and restore.
import { del, get, post } from '../api.js';
import { button, card, chip, confirmDialog, empty, fmtAgo, h, toast } from '../dom.js';

const path = (name, rest = '') => `v1/skills/${encodeURIComponent(name)}${rest}`;

export async function render(root) {
  const list = h('div', { class: 'list', id: 'skill-list' });
  const detail = h('div', { class: 'stack', id: 'skill-detail' });
  const showDeleted = h('input', { type: 'checkbox', name: 'deleted', 'aria-label': 'Show deleted skills' });

  async function load() {
    const res = await get('v1/skills', { deleted: showDeleted.checked ? 'true' : undefined, limit: 200 });
    const items = res.items || [];
    list.replaceChildren(...(items.length ? items.map(row) : [empty(showDeleted.checked
      ? 'No deleted skills to restore.' : 'No skills yet. Import one with the skill_import MCP tool or POST /v1/skills.')]));
  }

  function row(skill) {
    return h('article', { class: 'memory skill', dataset: { name: skill.name } },
      h('div', { class: 'memory-head' },
        h('strong', { class: 'skill-name' }, skill.name), chip(`v${skill.version}`),
        ...(skill.agents || []).map((a) => chip(a, 'type')),
        skill.deleted_at ? chip(`deleted ${fmtAgo(skill.deleted_at)}`, 'warn') : null),
      h('p', { class: 'memory-content' }, skill.description || ''),
      h('div', { class: 'memory-actions' },
        skill.deleted_at
          ? button('Restore', async () => {
            try { await post(path(skill.name, '/restore')); toast('Skill restored'); await load(); } catch (err) { toast(err.message, 'error'); }
          }, { kind: 'small', iconName: 'restore' })
          : button('Open', () => open(skill.name), { kind: 'small' })));
  }

  async function open(name, version) {
    let res;
    try { res = await get(path(name), { version }); } catch (err) { toast(err.message, 'error'); return; }
    const { skill, version: v } = res;
    const versions = (await get(path(name, '/versions'))).items || [];
    const agent = h('input', { type: 'text', name: 'agent', placeholder: 'claude-code', 'aria-label': 'Agent id' });
    const allocate = (agentId, allocated) => async () => {
      try { await post(path(name, '/allocate'), { agent_id: agentId, allocated }); toast(allocated ? `Allocated to ${agentId}` : `Removed from ${agentId}`); await open(name); await load(); } catch (err) { toast(err.message, 'error'); }
    };
    detail.replaceChildren(card(`${skill.name} · version ${v.version}${v.version !== skill.version ? ` (latest ${skill.version})` : ''}`,
      h('p', { class: 'muted small' }, v.description || ''),
      // The SKILL.md as text: a text node inside <pre>, never parsed as HTML or markdown.
      h('pre', { class: 'skill-text', id: 'skill-text' }, v.content),
      v.files && v.files.length ? h('ul', { class: 'small' }, ...v.files.map((f) => h('li', null, `${f.path} (${f.size} bytes)`))) : null,
      h('h3', { class: 'subhead' }, 'Agents'),
      h('div', { class: 'chips' }, ...(skill.agents || []).map((a) => h('span', { class: 'chip type' }, a, ' ',
        button('', allocate(a, false), { kind: 'ghost small', iconName: 'x', title: `Remove ${a}` })))),
      h('div', { class: 'import-row' }, agent, button('Allocate', () => {
        const id = agent.value.trim();
        if (!id) { toast('Type an agent id first', 'error'); return undefined; }
        return allocate(id, true)();
      }, { kind: 'small', iconName: 'plus' })),
      h('h3', { class: 'subhead' }, 'Versions'),
      h('ul', { class: 'versions' }, ...versions.slice().reverse().map((ver) => h('li', null,
        `v${ver.version} · ${fmtAgo(ver.created_at)}${ver.restored_from ? ` · restored from v${ver.restored_from}` : ''} `,
        button('Read', () => open(name, ver.version), { kind: 'ghost small' }),
        ver.version !== skill.version ? button('Restore as newest', async () => {
          try { await post(path(name, '/restore'), { version: ver.version }); toast(`v${ver.version} is the newest again`); await open(name); await load(); } catch (err) { toast(err.message, 'error'); }
        }, { kind: 'ghost small', iconName: 'restore' }) : null))),
      h('div', { class: 'form-actions' }, button('Delete', async () => {
        if (!await confirmDialog('Delete this skill?', `“${name}” disappears from listings, search and chats. You can restore it for 30 days.`, { confirm: 'Delete', danger: true })) return;
        try { await del(path(name)); toast('Skill deleted'); detail.replaceChildren(); await load(); } catch (err) { toast(err.message, 'error'); }
      }, { kind: 'danger small', iconName: 'trash' }))));
  }

  showDeleted.addEventListener('change', () => { detail.replaceChildren(); load().catch((err) => toast(err.message, 'error')); });
  root.append(h('div', { class: 'grid' },
    card('Skills', h('label', { class: 'check' }, showDeleted, ' Deleted (restorable for 30 days)'), list),
    detail));
  await load();
}


