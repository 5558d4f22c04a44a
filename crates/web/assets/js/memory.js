// Memory: what sessions keep for later ones, per workspace (<project>/.dsh/memory.md) and
// for the person ($DSH_HOME/memory.md). The same files as `dsh memory` and the sessions;
// new sessions read them in their first prompt. Proposals wait here for a yes.

import { h, clear, toast } from './util.js';
import { call } from './api.js';
import { workspace } from './store.js';

export function memoryPage(main) {
  clear(main);
  const body = h('div', { class: 'memory-body' }, h('p', null, 'Loading…'));
  main.append(h('section', { class: 'page memory', 'data-testid': 'memory-page' },
    h('header', { class: 'page-head' }, h('h1', null, 'Memory')),
    h('p', { class: 'muted' }, 'Facts sessions keep for later ones. A new session reads them when it starts; edits here apply from the next session on.'),
    body));
  load(body);
}

async function load(body) {
  const ws = workspace();
  if (!ws) {
    clear(body);
    body.append(h('p', { class: 'warn' }, 'Choose a workspace first: its memory lives in the project.'));
    return;
  }
  let r;
  try {
    r = await call('memory.list', { workspaceId: ws.workspaceId });
  } catch (e) {
    clear(body);
    body.append(h('p', { class: 'warn', 'data-testid': 'memory-error' }, e.message));
    return;
  }
  render(body, ws, r);
}

function render(body, ws, r) {
  clear(body);
  const reload = () => load(body);
  for (const w of r.warnings || []) body.append(h('p', { class: 'note note-error', 'data-testid': 'memory-warning' }, w));
  body.append(
    scopeCard(ws, 'workspace', `This project — ${r.workspace.display}`, r.workspace, reload),
    scopeCard(ws, 'user', `You, in every project — ${r.user.display}`, r.user, reload),
    addCard(ws, reload),
    h('p', { class: 'muted small' }, `Model writes: ${r.writes === 'allow' ? 'allowed without asking' : r.writes === 'deny' ? 'off' : 'asked once per session'}. Proposals from sessions: ${r.suggest ? 'on' : 'off'}.`));
}

function originText(e) {
  const parts = [];
  if (e.by) parts.push(`by ${e.by}`);
  if (e.at) parts.push(e.at.replace('T', ' ').replace('Z', ' UTC'));
  return parts.join(' · ');
}

function entryRow(ws, e, reload) {
  const text = h('div', { class: 'memory-text', 'data-testid': 'memory-text' }, e.text);
  const tags = e.tags.length ? h('span', { class: 'muted small' }, e.tags.map((t) => `#${t}`).join(' ')) : null;
  const meta = h('div', { class: 'memory-meta muted small' }, `[${e.id}] ${originText(e)}`);
  if (e.sessionId) meta.append(' · ', h('a', { href: `#/s/${encodeURIComponent(e.sessionId)}`, 'data-testid': 'memory-origin' }, e.turn ? `session, turn ${e.turn}` : 'session'));
  const act = async (method, extra, done) => {
    try { await call(method, { workspaceId: ws.workspaceId, id: e.id, ...extra }); toast(done, 'info'); reload(); } catch (err) { toast(err.message); }
  };
  const forget = h('button', { class: 'btn btn-small btn-danger', 'data-testid': 'memory-forget', 'aria-label': `Forget: ${e.text}` }, 'Forget');
  forget.addEventListener('click', () => act('memory.forget', {}, 'Forgotten.'));
  const edit = h('button', { class: 'btn btn-small', 'data-testid': 'memory-edit', 'aria-label': `Edit: ${e.text}` }, 'Edit');
  const row = h('li', { class: 'memory-entry', 'data-testid': 'memory-entry', 'data-id': e.id, 'data-proposed': e.proposed ? 'true' : 'false' });
  const buttons = h('div', { class: 'memory-buttons' });
  if (e.proposed) {
    const accept = h('button', { class: 'btn btn-small btn-primary', 'data-testid': 'memory-accept', 'aria-label': `Accept: ${e.text}` }, 'Accept');
    accept.addEventListener('click', () => act('memory.accept', {}, 'Accepted: new sessions see it.'));
    buttons.append(h('span', { class: 'badge badge-warn' }, 'proposed'), accept);
  }
  buttons.append(edit, forget);
  edit.addEventListener('click', () => {
    const area = h('textarea', { class: 'input', rows: 3, 'data-testid': 'memory-edit-input', 'aria-label': 'Memory text' });
    area.value = e.text;
    const save = h('button', { class: 'btn btn-small btn-primary', 'data-testid': 'memory-save' }, 'Save');
    const cancel = h('button', { class: 'btn btn-small', 'data-testid': 'memory-cancel' }, 'Cancel');
    save.addEventListener('click', () => act('memory.edit', { text: area.value }, 'Saved.'));
    cancel.addEventListener('click', reload);
    area.addEventListener('keydown', (k) => { if (k.key === 'Escape') reload(); });
    text.replaceWith(area);
    buttons.replaceChildren(cancel, save);
    area.focus();
  });
  row.append(h('div', { class: 'memory-main' }, text, tags, meta), buttons);
  return row;
}

function scopeCard(ws, scope, title, data, reload) {
  const list = h('ul', { class: 'memory-list', 'data-testid': `memory-${scope}` });
  for (const e of data.entries) list.append(entryRow(ws, e, reload));
  return h('div', { class: 'card', 'data-testid': `memory-card-${scope}` },
    h('div', { class: 'card-head' }, h('h2', null, title), h('span', { class: 'badge' }, `${data.entries.length}`)),
    data.entries.length ? list : h('p', { class: 'empty' }, 'Nothing kept yet.'));
}

function addCard(ws, reload) {
  const text = h('textarea', { class: 'input', rows: 2, placeholder: 'e.g. The integration tests need a running PostgreSQL', 'data-testid': 'memory-add-text', 'aria-label': 'New memory' });
  const scope = h('select', { class: 'select', 'data-testid': 'memory-add-scope', 'aria-label': 'Where to keep it' },
    h('option', { value: 'workspace' }, 'this project'), h('option', { value: 'user' }, 'me, in every project'));
  const add = h('button', { class: 'btn btn-primary', 'data-testid': 'memory-add' }, 'Remember');
  const submit = async () => {
    if (!text.value.trim()) { toast('Write the fact first.'); return; }
    add.disabled = true;
    try {
      const r = await call('memory.add', { workspaceId: ws.workspaceId, scope: scope.value, text: text.value });
      toast(r.duplicate ? 'Already kept.' : r.redacted ? `Kept, with ${r.redacted} secret(s) removed.` : 'Kept.', 'info');
      reload();
    } catch (e) { toast(e.message); add.disabled = false; }
  };
  add.addEventListener('click', submit);
  text.addEventListener('keydown', (e) => { if (e.key === 'Enter' && !e.shiftKey && !e.isComposing) { e.preventDefault(); submit(); } });
  return h('div', { class: 'card', 'data-testid': 'memory-new' },
    h('div', { class: 'card-head' }, h('h2', null, 'Keep a fact')),
    text, h('div', { class: 'card-actions' }, scope, add));
}
