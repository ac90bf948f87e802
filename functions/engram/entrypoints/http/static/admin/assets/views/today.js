// Today: messages, digest, yesterday's log, counts by type and layer, review queue, last job runs.
import { get, put } from '../api.js';
import { button, card, empty, field, fmtAgo, h, openDialog, toast } from '../dom.js';
import { runList, runRow } from './jobs-ui.js';

function stat(label, value, { href = null, tone = '' } = {}) {
  const inner = [h('span', { class: 'stat-value' }, String(value ?? 0)), h('span', { class: 'stat-label' }, label)];
  return href ? h('a', { class: `stat ${tone}`.trim(), href }, inner) : h('div', { class: `stat ${tone}`.trim() }, inner);
}

function bars(counts) {
  const entries = Object.entries(counts || {}).filter(([, n]) => n > 0).sort((a, b) => b[1] - a[1]);
  if (!entries.length) return empty('No active memories yet.');
  const max = Math.max(...entries.map(([, n]) => n));
  return h('ul', { class: 'bars' }, entries.map(([name, n]) => {
    const fill = h('span', { class: 'bar-fill' });
    fill.style.width = `${Math.max(4, (n / max) * 100)}%`; // CSSOM, allowed by the CSP (no inline styles)
    return h('li', null, h('span', { class: 'bar-label' }, name), h('span', { class: 'bar-track' }, fill),
      h('span', { class: 'bar-value' }, String(n)));
  }));
}

function dailyLog(log) {
  if (!log) return empty('No log for yesterday yet. Dreaming writes it each night.');
  const sections = (log.sections || []).map((s) => {
    const title = s.title || s.heading || s.name || '';
    const text = s.content || s.text || s.summary || Object.values(s).filter((v) => v !== title).join(' ');
    return h('div', { class: 'log-section' }, title ? h('h3', null, title) : null, h('p', null, text));
  });
  return h('div', { class: 'daily-log' },
    h('p', { class: 'muted' }, log.date),
    log.title ? h('h3', null, log.title) : null,
    log.summary ? h('p', { class: 'prose' }, log.summary) : null,
    sections);
}

export async function render(root, ctx) {
  const [boot, jobs] = await Promise.all([
    get('v1/memory_boot'),
    get('v1/jobs').catch((err) => ({ unavailable: err.status === 404, error: err })),
  ]);
  const stats = boot.stats || {};
  const counts = stats.memories || {};
  const active = Object.values(counts.type || {}).reduce((a, b) => a + b, 0);
  ctx.setReviewBadge(stats.pending_candidates || 0);

  const digestText = h('p', { class: 'prose digest' }, boot.digest?.content || '');
  const digestMeta = h('p', { class: 'muted small' }, boot.digest ? `Updated ${fmtAgo(boot.digest.updated_at)}` : '');
  if (!boot.digest?.content) digestText.replaceChildren(h('span', { class: 'muted' }, 'No digest yet. Dreaming writes one, or write it yourself.'));
  const editDigest = button('Edit', async () => {
    const saved = await openDialog('Edit digest', ({ body, footer, close }) => {
      const area = h('textarea', { rows: 8, maxlength: 4000 });
      area.value = boot.digest?.content || '';
      const counter = h('span', { class: 'field-hint' });
      const count = () => { counter.textContent = `${area.value.length} / 500 characters (longer text is cut)`; };
      area.addEventListener('input', count);
      count();
      body.append(field('L1 summary of you, injected into every new chat', area), counter);
      footer.append(button('Cancel', () => close(null), { kind: 'ghost' }),
        button('Save', async () => {
          try { close(await put('v1/digest', { content: area.value })); } catch (err) { toast(err.message, 'error'); }
        }, { kind: 'primary' }));
    }, { wide: true });
    if (saved) {
      boot.digest = saved;
      digestText.textContent = saved.content;
      digestMeta.textContent = `Updated ${fmtAgo(saved.updated_at)}`;
      toast('Digest saved');
    }
  }, { kind: 'ghost small', iconName: 'edit' });

  let jobsBody;
  if (jobs.unavailable) jobsBody = empty('Jobs are not available in this build.');
  else if (jobs.error) jobsBody = h('p', { class: 'callout error' }, jobs.error.message);
  else {
    const runs = runList(jobs).slice(0, 6);
    jobsBody = runs.length ? h('ul', { class: 'runs' }, runs.map(runRow)) : empty('No job has run yet.');
  }

  const now = new Date();
  root.append(
    h('header', { class: 'page-head' },
      h('div', null, h('h1', null, 'Today'),
        h('p', { class: 'muted' }, now.toLocaleDateString(undefined, { weekday: 'long', month: 'long', day: 'numeric' }))),
      button('Refresh', () => { window.dispatchEvent(new HashChangeEvent('hashchange')); }, { kind: 'ghost small', iconName: 'refresh' })),
    h('div', { class: 'stats' },
      stat('messages today', boot.today_count ?? stats.messages_today),
      stat('to review', stats.pending_candidates, { href: '#review', tone: stats.pending_candidates ? 'attention' : '' }),
      stat('active memories', active, { href: '#memories' }),
      stat('precious notes', stats.precious, { href: '#more' }),
      stat('glossary terms', stats.glossary, { href: '#more/glossary' })),
    h('div', { class: 'grid' },
      h('section', { class: 'card span-2' },
        h('div', { class: 'card-head' }, h('h2', { class: 'card-title' }, 'Digest'), editDigest),
        digestText, digestMeta),
      card("Yesterday's log", dailyLog(boot.yesterday)),
      card('Last job runs', jobsBody),
      card('Memories by type', bars(counts.type)),
      card('Memories by layer', bars(counts.layer),
        h('p', { class: 'muted small card-foot' }, [
          `${stats.messages_total ?? 0} messages stored`,
          ...Object.entries(counts.status || {}).filter(([s, n]) => s !== 'active' && n).map(([s, n]) => `${n} ${s}`),
        ].join(' · ')))),
  );
}
