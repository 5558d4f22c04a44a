// The sidebar: workspaces (choose, add, remove), New session, search, the session list
// (title, workspace, last activity, state) and the archived list.

import { h, clear, fmtAgo, basename, toast, dialog, confirmDialog, icon } from './util.js';
import { call } from './api.js';
import { state, subscribe, changed, chooseWorkspace, workspace, refreshLists } from './store.js';

const STATE_LABEL = { running: 'running', approval: 'needs approval', question: 'needs an answer', error: 'error', unreadable: 'unreadable', idle: '' };

export function mountSidebar(el) {
  const wsSelect = h('select', { class: 'input', 'data-testid': 'workspace-select', 'aria-label': 'Workspace' });
  wsSelect.addEventListener('change', () => chooseWorkspace(wsSelect.value));
  const addWs = h('button', { class: 'btn btn-small', 'data-testid': 'add-workspace', onclick: () => addWorkspaceDialog() }, icon('plus'), 'Add');
  const removeWs = h('button', { class: 'btn btn-small', 'data-testid': 'remove-workspace', onclick: () => removeWorkspace() }, 'Remove');
  const wsNote = h('div', { class: 'ws-note', 'data-testid': 'workspace-note' });
  const newBtn = h('button', { class: 'btn btn-primary btn-block', 'data-testid': 'new-session', onclick: () => { location.hash = '#/'; } }, icon('plus'), 'New session');
  const search = h('input', { class: 'input', type: 'search', placeholder: 'Search sessions (Enter for full text)', 'data-testid': 'search', 'aria-label': 'Search sessions' });
  const list = h('nav', { class: 'session-list', 'data-testid': 'session-list' });
  const archivedToggle = h('button', { class: 'link', 'data-testid': 'toggle-archived' }, 'Show archived');
  const archivedList = h('nav', { class: 'session-list archived hidden', 'data-testid': 'archived-list' });
  archivedToggle.addEventListener('click', () => {
    state.showArchived = !state.showArchived;
    refreshLists();
    changed();
  });
  search.addEventListener('input', () => {
    state.search.query = search.value;
    state.search.results = null;
    changed();
  });
  search.addEventListener('keydown', async (e) => {
    if (e.key !== 'Enter' || !search.value.trim()) return;
    try {
      const r = await call('session.search', { query: search.value });
      state.search.results = r.items;
      changed();
    } catch (err) { toast(err.message); }
  });
  const settings = h('a', { class: 'nav-link', href: '#/settings', 'data-testid': 'nav-settings' }, icon('gear'), 'Settings');
  const memory = h('a', { class: 'nav-link', href: '#/memory', 'data-testid': 'nav-memory' }, icon('book'), 'Memory');

  el.append(
    h('div', { class: 'brand' }, h('span', { class: 'logo' }, '›_'), 'dsh'),
    h('section', { class: 'ws' }, h('label', { class: 'ws-label' }, 'Workspace'), wsSelect, h('div', { class: 'ws-buttons' }, addWs, removeWs), wsNote),
    newBtn,
    search,
    list,
    archivedToggle,
    archivedList,
    h('div', { class: 'sidebar-foot' }, memory, settings));

  let lastKey = '';
  const render = () => {
    // Rebuild only when something shown changed (a click never lands on a replaced row).
    const key = JSON.stringify([state.workspaces, state.workspaceId, state.sessions, state.archivedSessions, state.showArchived, state.search, state.current]);
    if (key === lastKey) return;
    lastKey = key;
    clear(wsSelect);
    wsSelect.append(h('option', { value: '' }, state.workspaces.length ? 'Choose a workspace…' : 'No workspace yet'));
    for (const w of state.workspaces) {
      const label = w.status === 'missing-dir' ? `${w.title} (directory missing)` : w.title;
      wsSelect.append(h('option', { value: w.workspaceId, selected: w.workspaceId === state.workspaceId }, label));
    }
    wsSelect.value = state.workspaceId;
    const ws = workspace();
    removeWs.disabled = !ws;
    wsNote.textContent = ws ? (ws.status === 'missing-dir' ? `Directory ${ws.path} no longer exists` : ws.path) : '';
    wsNote.classList.toggle('warn', !!(ws && ws.status === 'missing-dir'));
    newBtn.disabled = !ws || ws.status === 'missing-dir';

    clear(list);
    let rows = state.sessions;
    const q = state.search.query.trim().toLowerCase();
    if (state.search.results) {
      const byId = new Map(state.sessions.concat(state.archivedSessions).map((s) => [s.sessionId, s]));
      rows = state.search.results.map((r) => ({ ...(byId.get(r.sessionId) || { sessionId: r.sessionId, title: r.title }), snippet: r.snippet }));
    } else if (q) {
      rows = rows.filter((s) => (s.title || '').toLowerCase().includes(q));
    }
    if (!rows.length) list.append(h('div', { class: 'empty' }, q ? 'No matching session.' : 'No sessions yet.'));
    if (state.search.results || q) for (const s of rows) list.append(row(s));
    else for (const g of grouped(rows)) list.append(g);
    archivedToggle.textContent = state.showArchived ? 'Hide archived' : 'Show archived';
    archivedList.classList.toggle('hidden', !state.showArchived);
    clear(archivedList);
    if (state.showArchived) {
      if (!state.archivedSessions.length) archivedList.append(h('div', { class: 'empty' }, 'Nothing archived.'));
      for (const s of state.archivedSessions) archivedList.append(row(s));
    }
  };
  subscribe(render);
  render();
}

// Sessions grouped by workspace (the chosen one first, then by latest activity), each
// fork or child session nested under the session it came from.
function grouped(rows) {
  const groups = new Map();
  for (const s of rows) {
    const key = s.workspaceId || '';
    if (!groups.has(key)) groups.set(key, []);
    groups.get(key).push(s);
  }
  const order = [...groups.keys()].sort((a, b) => {
    if (a === state.workspaceId) return -1;
    if (b === state.workspaceId) return 1;
    if (!a) return 1;
    if (!b) return -1;
    const latest = (k) => Math.max(...groups.get(k).map((s) => s.updatedAt || 0));
    return latest(b) - latest(a);
  });
  return order.map((key) => {
    const items = groups.get(key);
    const ws = state.workspaces.find((w) => w.workspaceId === key);
    const ids = new Set(items.map((s) => s.sessionId));
    const children = new Map();
    for (const s of items) {
      const parent = s.parentSessionId && ids.has(s.parentSessionId) ? s.parentSessionId : '';
      if (!children.has(parent)) children.set(parent, []);
      children.get(parent).push(s);
    }
    const body = h('div', { class: 'group-rows' });
    const seen = new Set();
    const add = (s, depth) => {
      if (seen.has(s.sessionId)) return; // a cycle in stored parents cannot loop here
      seen.add(s.sessionId);
      const r = row(s);
      if (depth) {
        r.classList.add('child-row');
        r.style.setProperty('--depth', String(Math.min(depth, 4)));
        r.dataset.parent = s.parentSessionId;
      }
      body.append(r);
      for (const c of children.get(s.sessionId) || []) add(c, depth + 1);
    };
    for (const s of children.get('') || []) add(s, 0);
    const title = ws ? ws.title : (key ? 'Removed workspace' : 'Other directories');
    return h('details', { class: 'session-group', open: true, 'data-testid': 'session-group', 'data-workspace': key },
      h('summary', { class: 'group-head', title: ws ? ws.path : '' }, title, h('span', { class: 'group-count' }, String(items.length))),
      body);
  });
}

function row(s) {
  const ws = state.workspaces.find((w) => w.workspaceId === s.workspaceId);
  const where = ws ? ws.title : basename(s.cwd);
  const badge = STATE_LABEL[s.state] || '';
  const a = h('a', {
    class: `session-row${state.current === s.sessionId ? ' active' : ''}`,
    href: `#/s/${encodeURIComponent(s.sessionId)}`,
    'data-testid': 'session-row',
    'data-session': s.sessionId,
    'data-state': s.state || '',
    title: s.error || s.title || s.sessionId,
  },
  h('span', { class: 'row-title' }, s.title || 'Untitled session'),
  h('span', { class: 'row-meta' }, where ? `${where} · ` : '', fmtAgo(s.updatedAt)),
  badge ? h('span', { class: `badge badge-${s.state}` }, badge) : null,
  s.snippet ? h('span', { class: 'row-snippet', 'data-testid': 'search-snippet' }, s.snippet) : null);
  return a;
}

async function removeWorkspace() {
  const ws = workspace();
  if (!ws) return;
  const ok = await confirmDialog('Remove workspace', `Remove “${ws.title}” from the list? The directory ${ws.path} and its sessions stay on disk.`, 'Remove', { testid: 'remove-workspace-dialog' });
  if (!ok) return;
  try {
    await call('workspace.delete', { workspaceId: ws.workspaceId });
    chooseWorkspace('');
    await refreshLists();
  } catch (e) { toast(e.message); }
}

export async function addWorkspaceDialog() {
  const cwd = state.host && state.host.cwd;
  const chosen = await dialog('Add a workspace', (close) => {
    const path = h('input', { class: 'input', placeholder: '/path/to/project', 'data-testid': 'workspace-path', 'aria-label': 'Directory' });
    const crumbs = h('div', { class: 'crumbs' });
    const entries = h('div', { class: 'dir-list', 'data-testid': 'dir-list' });
    // What the user typed is theirs: a listing that answers later (the first one, or a
    // slow one) never overwrites it; choosing a directory in the list does.
    let typed = false;
    path.addEventListener('input', () => { typed = true; });
    const browse = async (p, chosen = false) => {
      if (chosen) typed = false;
      try {
        const r = await call('host.listDirectory', p ? { path: p } : {});
        if (!typed) path.value = r.path;
        clear(crumbs);
        for (const c of r.crumbs) crumbs.append(h('button', { class: 'link', onclick: () => browse(c.path, true) }, c.name || '/'), ' / ');
        clear(entries);
        for (const e of r.entries.filter((x) => !x.hidden)) {
          entries.append(h('button', { class: 'dir', 'data-testid': 'dir-entry', onclick: () => browse(e.path, true) }, icon('folder'), e.name));
        }
        if (!r.entries.length) entries.append(h('div', { class: 'empty' }, 'No subdirectories.'));
        if (r.truncated) entries.append(h('div', { class: 'empty' }, 'More entries not shown.'));
      } catch (e) { toast(e.message); }
    };
    path.addEventListener('keydown', (e) => { if (e.key === 'Enter' && !e.isComposing) { e.preventDefault(); close(path.value); } });
    const useCwd = cwd ? h('button', { class: 'btn btn-primary btn-block', 'data-testid': 'use-cwd', onclick: () => close(cwd) }, `Use current directory: ${cwd}`) : null;
    browse(cwd || '');
    return h('div', { class: 'ws-dialog' },
      useCwd,
      h('label', { class: 'field' }, h('span', null, 'Or another directory'), path),
      crumbs,
      entries,
      h('div', { class: 'dialog-actions' },
        h('button', { class: 'btn', onclick: () => close(undefined), 'data-testid': 'dialog-cancel' }, 'Cancel'),
        h('button', { class: 'btn btn-primary', onclick: () => close(path.value), 'data-testid': 'workspace-add-confirm' }, 'Add this directory')));
  }, { testid: 'workspace-dialog' });
  if (!chosen || !chosen.trim()) return null;
  try {
    const r = await call('workspace.create', { path: chosen.trim() });
    await refreshLists();
    chooseWorkspace(r.workspace.workspaceId);
    return r.workspace;
  } catch (e) {
    toast(e.message);
    return null;
  }
}
