// App-wide state: host facts, workspaces, session lists, the chosen workspace. Views
// subscribe and re-render on change; lists are refetched (debounced) when the server
// says they changed.

import { call } from './api.js';
import { toast } from './util.js';

export const state = {
  host: null,
  workspaces: [],
  archivedIds: [],
  sessions: [],
  archivedSessions: [],
  showArchived: false,
  workspaceId: localStorage.getItem('dsh.workspace') || '',
  current: null,
  search: { query: '', results: null },
  stopped: false,
};

const listeners = new Set();
export function subscribe(f) { listeners.add(f); return () => listeners.delete(f); }
export function changed() { for (const f of listeners) f(state); }

export function chooseWorkspace(id) {
  state.workspaceId = id || '';
  if (id) localStorage.setItem('dsh.workspace', id);
  else localStorage.removeItem('dsh.workspace');
  changed();
}

export function workspace(id = state.workspaceId) {
  return state.workspaces.find((w) => w.workspaceId === id) || null;
}

let pending = null;
let inflight = null;
export function refreshSoon() {
  clearTimeout(pending);
  pending = setTimeout(() => refreshLists(), 120);
}

export async function refreshLists() {
  if (inflight) { refreshSoon(); return inflight; }
  inflight = (async () => {
    try {
      const [ws, live, archived] = await Promise.all([
        call('workspace.list').catch((e) => { toast(e.message); return { items: state.workspaces, archivedSessionIds: state.archivedIds }; }),
        call('session.list', { archived: false }),
        state.showArchived ? call('session.list', { archived: true }) : Promise.resolve({ items: [] }),
      ]);
      state.workspaces = ws.items || [];
      state.archivedIds = ws.archivedSessionIds || [];
      state.sessions = live.items || [];
      state.archivedSessions = archived.items || [];
      if (state.workspaceId && !workspace()) chooseWorkspace('');
      // In front of a team gateway there is one workspace, the team's: it is the choice.
      if (!state.workspaceId && state.host && state.host.gateway && state.workspaces.length) chooseWorkspace(state.workspaces[0].workspaceId);
      changed();
    } catch (e) {
      toast(e.message);
    } finally {
      inflight = null;
    }
  })();
  return inflight;
}

export function sessionRow(id) {
  return state.sessions.find((s) => s.sessionId === id)
    || state.archivedSessions.find((s) => s.sessionId === id)
    || null;
}
