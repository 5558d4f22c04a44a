// Boot and routing: #/ (start a task), #/s/<id> (a conversation), #/settings, #/memory.

import { h, clear, toast, icon } from './util.js';
import { call, Stream, setUnauthorizedHandler } from './api.js';
import { state, subscribe, refreshLists, refreshSoon, workspace } from './store.js';
import { mountSidebar, addWorkspaceDialog } from './sidebar.js';
import { Conversation } from './conv.js';
import { DraftImages, acceptImages, promptContent } from './images.js';
import { settingsPage } from './settings.js';

// Script errors are collected for diagnostics (tests assert there are none).
window.__dshErrors = window.__dshErrors || [];
window.addEventListener('error', (e) => window.__dshErrors.push(String(e.message)));
window.addEventListener('unhandledrejection', (e) => window.__dshErrors.push(String((e.reason && e.reason.message) || e.reason)));

const main = document.getElementById('main');
let view = null; // {kind, conv?, stream?, unsubscribe?}

function leave() {
  if (!view) return;
  if (view.conv) view.conv.destroy();
  if (view.stream) view.stream.close();
  if (view.drafts) view.drafts.clear();
  if (view.unsubscribe) view.unsubscribe();
  view = null;
}

function hostStream() {
  return new Stream(null, {
    host: () => refreshSoon(),
    shutdown: () => { state.stopped = true; toast('dsh web stopped.'); },
  });
}

function home() {
  leave();
  clear(main);
  state.current = null;
  const input = h('textarea', { class: 'composer-input', rows: 4, placeholder: 'Describe a task, e.g. “run the tests and fix what fails” (images can be pasted or dropped)', 'data-testid': 'home-input', 'aria-label': 'Task' });
  const drafts = new DraftImages();
  const send = h('button', { class: 'btn btn-primary', 'data-testid': 'home-send' }, icon('send'), 'Start');
  const note = h('div', { class: 'composer-note', 'data-testid': 'home-note' });
  const reply = h('div', { class: 'note', 'data-testid': 'command-reply', role: 'status', hidden: true });
  const where = h('div', { class: 'home-where', 'data-testid': 'home-where' });
  // The agent preset the new session runs (fixed once it starts).
  const preset = h('select', { class: 'select select-small hidden', 'data-testid': 'home-preset', 'aria-label': 'Agent preset for the new session', title: 'Agent preset for the new session (fixed once it starts)' });
  call('agentPresets.list').then((r) => {
    const list = r.presets || [];
    for (const p of list) preset.append(h('option', { value: p.id, title: p.description || '' }, `agent: ${p.name || p.id}`));
    const def = list.find((p) => p.isDefault);
    if (def) preset.value = def.id;
    preset.classList.toggle('hidden', list.length < 2);
  }).catch(() => {});
  const render = () => {
    const ws = workspace();
    clear(where);
    let reason = '';
    if (state.stopped) reason = 'dsh web is not running.';
    else if (!ws) reason = 'Choose a workspace first: the directory the agent works in.';
    else if (ws.status === 'missing-dir') reason = `Directory ${ws.path} no longer exists; choose another workspace.`;
    if (ws) where.append('in ', h('strong', null, ws.title), ` — ${ws.path}`);
    else if (state.host && state.host.cwd) {
      where.append(h('button', { class: 'btn', 'data-testid': 'home-use-cwd', onclick: () => addWorkspaceDialog() }, icon('folder'), 'Choose a workspace…'));
    }
    input.disabled = !!reason;
    send.disabled = !!reason;
    note.textContent = reason;
  };
  const submit = async () => {
    const text = input.value;
    const images = drafts.items.slice();
    const ws = workspace();
    if ((!text.trim() && !images.length) || !ws || send.disabled) return;
    send.disabled = true;
    try {
      const content = await promptContent(text, images);
      const { sessionId } = await call('session.create', { workspaceId: ws.workspaceId, ...(preset.value ? { agentPreset: preset.value } : {}) });
      const r = await call('session.prompt', { sessionId, mode: 'queue', content });
      input.value = '';
      drafts.clear();
      if (r.command && !r.command.recorded) {
        // /help or an unknown name: answered here; the session it needed stays empty and
        // is removed rather than left behind as a blank entry.
        reply.textContent = r.command.text;
        reply.className = r.command.isError ? 'note note-error' : 'note';
        reply.hidden = false;
        call('session.delete', { sessionId }).catch(() => {});
        render();
        return;
      }
      location.hash = `#/s/${encodeURIComponent(sessionId)}`;
      refreshSoon();
    } catch (e) { toast(e.message); render(); }
  };
  send.addEventListener('click', submit);
  input.addEventListener('keydown', (e) => { if (e.key === 'Enter' && !e.shiftKey && !e.isComposing) { e.preventDefault(); submit(); } });
  const composer = h('div', { class: 'composer', 'data-testid': 'home-composer' },
    h('div', { class: 'composer-field' }, drafts.el, input), h('div', { class: 'composer-buttons' }, preset, send));
  acceptImages(composer, input, drafts, { say: (m) => toast(m) });
  main.append(h('section', { class: 'page home', 'data-testid': 'home' },
    h('h1', null, 'What should dsh do?'),
    where,
    composer,
    note,
    reply));
  view = { kind: 'home', stream: hostStream(), unsubscribe: subscribe(render), drafts };
  render();
  input.focus();
}

function session(id) {
  if (view && view.kind === 'session' && view.conv.id === id) return;
  leave();
  clear(main);
  state.current = id;
  const conv = new Conversation(id, { onClose: () => { location.hash = '#/'; } });
  main.append(conv.el);
  view = { kind: 'session', conv, unsubscribe: subscribe(() => conv.header()) };
  conv.header();
  refreshSoon();
}

function settings() {
  leave();
  state.current = null;
  settingsPage(main);
  view = { kind: 'settings', stream: hostStream() };
}

async function memory() {
  leave();
  state.current = null;
  // Loaded on first visit: the first page does not pay for it.
  const { memoryPage } = await import('./memory.js');
  if (!(location.hash || '').startsWith('#/memory') || view) return; // navigated away meanwhile
  memoryPage(main);
  // The page follows the workspace chosen in the sidebar.
  let shown = state.workspaceId;
  view = { kind: 'memory', stream: hostStream(), unsubscribe: subscribe(() => { if (state.workspaceId !== shown) { shown = state.workspaceId; memoryPage(main); } }) };
}

function route() {
  const hash = location.hash || '#/';
  const m = /^#\/s\/(.+)$/.exec(hash);
  if (m) session(decodeURIComponent(m[1]));
  else if (hash.startsWith('#/settings')) settings();
  else if (hash.startsWith('#/memory')) memory();
  else home();
  refreshSidebarSelection();
}

// Narrow screens (phones): the sidebar is a drawer behind the ☰ button; choosing a
// session, a page or New session closes it, as do Escape and a tap beside it.
function drawer() {
  const app = document.getElementById('app');
  const btn = document.getElementById('menu');
  const scrim = document.getElementById('scrim');
  const sidebar = document.getElementById('sidebar');
  const set = (open) => {
    app.classList.toggle('drawer-open', open);
    btn.setAttribute('aria-expanded', String(open));
    scrim.hidden = !open;
    if (open) { const first = sidebar.querySelector('button, a, input, select'); if (first) first.focus(); }
  };
  btn.addEventListener('click', () => set(!app.classList.contains('drawer-open')));
  scrim.addEventListener('click', () => set(false));
  document.addEventListener('keydown', (e) => {
    if (e.key === 'Escape' && app.classList.contains('drawer-open') && !document.querySelector('dialog[open]')) { set(false); btn.focus(); }
  });
  window.addEventListener('hashchange', () => set(false));
  sidebar.addEventListener('click', (e) => { if (e.target.closest('a[href], [data-testid=new-session]')) set(false); });
}

function refreshSidebarSelection() {
  for (const a of document.querySelectorAll('.session-row')) a.classList.toggle('active', a.dataset.session === state.current);
}

function unauthorized() {
  leave();
  const app = document.getElementById('app');
  clear(app);
  app.append(h('section', { class: 'page signed-out', 'data-testid': 'signed-out' },
    h('h1', null, 'Signed out'),
    h('p', null, 'Open the URL printed by dsh web (it carries a one-time token) to use this page.')));
}

async function boot() {
  setUnauthorizedHandler(unauthorized);
  try {
    state.host = await call('host.describe');
    // In front of a team gateway the team's workers run the sessions: this machine's own
    // actions (settings, memory, workspaces, rename, fork, export, delete) are not offered.
    document.body.classList.toggle('team-gateway', !!state.host.gateway);
  } catch (e) {
    if (e.code !== 'unauthorized') toast(e.message);
    return;
  }
  mountSidebar(document.getElementById('sidebar'));
  drawer();
  // The skip link (first in the tab order) moves focus to the message box of the page.
  document.getElementById('skip').addEventListener('click', () => {
    const box = document.querySelector('[data-testid=composer-input], [data-testid=home-input]');
    if (box) box.focus();
  });
  subscribe(refreshSidebarSelection);
  await refreshLists();
  window.addEventListener('hashchange', route);
  route();
  window.__dsh = window.__dsh || {};
  window.__dsh.booted = true;
}

boot();
