// Shell of the admin panel: session check, login, tab routing.
import { api, onUnauthorized } from './api.js';
import { h, spinner, toast } from './dom.js';
import * as today from './views/today.js';
import * as review from './views/review.js';
import * as memories from './views/memories.js';
import * as more from './views/more.js';
import * as settings from './views/settings.js';
import * as skills from './views/skills.js';
import * as conversations from './views/conversations.js';

const VIEWS = { today, review, conversations, memories, skills, more, settings };
const $ = (id) => document.getElementById(id);
let renderToken = 0;

export function setReviewBadge(count) {
  const badge = $('review-badge');
  badge.textContent = count > 99 ? '99+' : String(count);
  badge.hidden = !count;
}

async function route() {
  const name = (window.location.hash.slice(1) || 'today').split('/')[0];
  const viewName = VIEWS[name] ? name : 'today';
  for (const link of document.querySelectorAll('#tabs a')) {
    const active = link.dataset.tab === viewName;
    link.classList.toggle('active', active);
    if (active) link.setAttribute('aria-current', 'page'); else link.removeAttribute('aria-current');
  }
  const token = ++renderToken;
  const root = h('div', { class: 'page', dataset: { view: viewName } });
  const main = $('view');
  main.replaceChildren(spinner());
  try {
    await VIEWS[viewName].render(root, { setReviewBadge, isCurrent: () => token === renderToken });
    if (token !== renderToken) return;
    main.replaceChildren(root);
  } catch (err) {
    if (token !== renderToken) return;
    main.replaceChildren(h('div', { class: 'page' }, h('div', { class: 'callout error' },
      h('strong', null, 'This page could not load. '), err.message || String(err))));
  }
}

function showLogin(session) {
  $('boot').hidden = true;
  $('app').hidden = true;
  $('login').hidden = false;
  $('login-form').hidden = !session.configured;
  $('login-setup').hidden = session.configured;
  if (session.configured) $('password').focus();
}

async function showApp() {
  $('boot').hidden = true;
  $('login').hidden = true;
  $('app').hidden = false;
  await route();
  api('v1/stats').then((s) => setReviewBadge(s.pending_candidates || 0)).catch(() => {});
}

async function start() {
  let session;
  try {
    session = await api('admin/session');
  } catch (err) {
    $('boot').replaceChildren(h('p', { class: 'callout error' }, err.message));
    return;
  }
  if (session.authenticated) await showApp(); else showLogin(session);
}

$('login-form').addEventListener('submit', async (event) => {
  event.preventDefault();
  const error = $('login-error');
  const submit = event.target.querySelector('button[type=submit]');
  error.hidden = true;
  submit.disabled = true;
  try {
    await api('admin/login', { method: 'POST', body: { password: $('password').value }, quiet401: true });
    $('password').value = '';
    await showApp();
  } catch (err) {
    error.textContent = err.status === 401 ? 'Wrong password.' : err.message;
    error.hidden = false;
  } finally {
    submit.disabled = false;
  }
});

$('logout').addEventListener('click', async () => {
  try { await api('admin/logout', { method: 'POST' }); } catch { /* the cookie is cleared either way */ }
  window.location.hash = '';
  showLogin({ configured: true });
});

onUnauthorized(() => {
  toast('Your session ended. Please log in again.', 'error');
  showLogin({ configured: true });
});

window.addEventListener('hashchange', () => { if (!$('app').hidden) route(); });
start();
