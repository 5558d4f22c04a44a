// Settings → Models: save the DeepSeek key (write-only: the page learns whether it is
// configured and where from, never the value); it is used from the next request on.

import { h, clear, toast } from './util.js';
import { call } from './api.js';

const SOURCE = {
  env: 'from the environment dsh web was started with (read-only here)',
  file: 'saved in ~/.dsh/.credentials.yaml',
  'project-dotenv': 'from .env in the launch directory',
  'user-dotenv': 'from ~/.dsh/.env',
};

export function settingsPage(main) {
  clear(main);
  const body = h('div', { class: 'settings-body' }, h('p', null, 'Loading…'));
  main.append(h('section', { class: 'page settings', 'data-testid': 'settings' },
    h('header', { class: 'page-head' }, h('h1', null, 'Settings'), h('nav', { class: 'tabs' }, h('span', { class: 'tab active' }, 'Models'))),
    body));
  load(body);
}

async function load(body) {
  let providers;
  try {
    providers = await call('llm.providers');
  } catch (e) {
    clear(body);
    body.append(h('p', { class: 'warn' }, e.message));
    return;
  }
  clear(body);
  const def = providers.default;
  body.append(h('p', { class: 'muted', 'data-testid': 'default-model' }, def ? `New sessions use ${def.model} (${def.provider}).` : 'No default model is configured.'));
  for (const p of providers.items) if (p.credentialRef) body.append(providerCard(p));
}

function providerCard(p) {
  const status = h('span', { class: 'badge', 'data-testid': 'key-status' });
  const input = h('input', { class: 'input', type: 'password', autocomplete: 'off', placeholder: 'sk-…', 'data-testid': 'deepseek-key', 'aria-label': `${p.name} API key` });
  const save = h('button', { class: 'btn btn-primary', 'data-testid': 'save-key' }, 'Save key');
  const remove = h('button', { class: 'btn', 'data-testid': 'remove-key' }, 'Remove');
  const show = (c) => {
    const configured = c && c.configured;
    status.textContent = configured ? `configured — ${SOURCE[c.source] || c.source}` : 'not configured';
    status.className = `badge ${configured ? 'badge-ok' : 'badge-warn'}`;
    status.dataset.configured = configured ? 'true' : 'false';
    remove.disabled = !(c && c.source === 'file');
    input.disabled = !!(c && !c.writable);
    save.disabled = !!(c && !c.writable);
  };
  show(p.credential);
  const submit = async () => {
    const value = input.value.trim();
    if (!value) { toast('Enter the key first.'); return; }
    save.disabled = true;
    try {
      const r = await call('credentials.set', { ref: p.credentialRef, value });
      input.value = '';
      show(r.credential);
      toast('Key saved; it is used from the next request on.', 'info');
    } catch (e) { toast(e.message); } finally { save.disabled = false; }
  };
  save.addEventListener('click', submit);
  input.addEventListener('keydown', (e) => { if (e.key === 'Enter') submit(); });
  remove.addEventListener('click', async () => {
    try {
      const r = await call('credentials.unset', { ref: p.credentialRef });
      show(r.credential);
      toast('Key removed.', 'info');
    } catch (e) { toast(e.message); }
  });
  return h('div', { class: 'card provider', 'data-testid': `provider-${p.id}` },
    h('div', { class: 'card-head' }, h('h2', null, p.name), status),
    h('label', { class: 'field' }, h('span', null, `API key (${p.credentialRef})`), input),
    h('div', { class: 'card-actions' }, remove, save),
    h('p', { class: 'muted small' }, 'The key is stored with mode 0600 and never sent back to this page.'));
}
