// Settings → Models: save the DeepSeek key, add OpenAI-compatible endpoints, choose the
// model new sessions use. Keys are write-only: the page learns whether a key is configured
// and where from, never its value. Everything applies from the next request on.

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
  render(body, providers);
}

function render(body, providers) {
  clear(body);
  body.append(defaultCard(body, providers));
  for (const p of providers.items) body.append(p.kind === 'deepseek' ? keyCard(p) : endpointCard(body, p));
  body.append(newEndpointCard(body));
}

function keyStatus(c) {
  const configured = !!(c && c.configured);
  const el = h('span', { class: `badge ${configured ? 'badge-ok' : 'badge-warn'}`, 'data-testid': 'key-status', 'data-configured': configured ? 'true' : 'false' },
    configured ? `key configured — ${SOURCE[c.source] || c.source}` : 'no key');
  return el;
}

function defaultCard(body, providers) {
  const select = h('select', { class: 'input', 'data-testid': 'default-model', 'aria-label': 'Default model' });
  for (const p of providers.items) {
    for (const m of p.models || []) {
      const value = JSON.stringify([p.id, m]);
      const chosen = providers.default && providers.default.provider === p.id && providers.default.model === m;
      select.append(h('option', { value, selected: chosen }, `${m} — ${p.name}`));
    }
  }
  select.addEventListener('change', async () => {
    const [provider, model] = JSON.parse(select.value);
    try {
      render(body, await call('llm.setDefault', { provider, model }));
      toast(`New sessions use ${model}.`, 'info');
    } catch (e) { toast(e.message); }
  });
  return h('div', { class: 'card' },
    h('div', { class: 'card-head' }, h('h2', null, 'Default model')),
    h('label', { class: 'field' }, h('span', null, 'New sessions use'), select));
}

function keyCard(p) {
  let status = keyStatus(p.credential);
  const head = h('div', { class: 'card-head' }, h('h2', null, p.name), status);
  const input = h('input', { class: 'input', type: 'password', autocomplete: 'off', placeholder: 'sk-…', 'data-testid': 'deepseek-key', 'aria-label': `${p.name} API key` });
  const save = h('button', { class: 'btn btn-primary', 'data-testid': 'save-key' }, 'Save key');
  const remove = h('button', { class: 'btn', 'data-testid': 'remove-key' }, 'Remove');
  const show = (c) => {
    const next = keyStatus(c);
    status.replaceWith(next);
    status = next;
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
    } catch (e) { toast(e.message); save.disabled = false; }
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
    head,
    h('label', { class: 'field' }, h('span', null, `API key (${p.credentialRef})`), input),
    h('div', { class: 'card-actions' }, remove, save),
    h('p', { class: 'muted small' }, 'Stored with mode 0600 and never sent back to this page.'));
}

function endpointCard(body, p) {
  const remove = h('button', { class: 'btn btn-danger', 'data-testid': 'remove-provider' }, 'Remove');
  remove.addEventListener('click', async () => {
    try { render(body, await call('llm.removeProvider', { id: p.id })); } catch (e) { toast(e.message); }
  });
  return h('div', { class: 'card provider', 'data-testid': `provider-${p.id}` },
    h('div', { class: 'card-head' }, h('h2', null, `${p.name}`), keyStatus(p.credential)),
    h('p', { class: 'muted' }, `OpenAI-compatible endpoint ${p.baseURL} — models: ${(p.models || []).join(', ')}`),
    h('div', { class: 'card-actions' }, remove));
}

function newEndpointCard(body) {
  const field = (label, attrs) => {
    const input = h('input', { class: 'input', ...attrs });
    return [input, h('label', { class: 'field' }, h('span', null, label), input)];
  };
  const [id, idField] = field('Provider id (letters, digits, dashes)', { placeholder: 'my-llm', 'data-testid': 'endpoint-id' });
  const [url, urlField] = field('Base URL (requests go to <base>/chat/completions)', { placeholder: 'https://api.example.com/v1', 'data-testid': 'endpoint-url' });
  const [key, keyField] = field('API key (optional)', { type: 'password', autocomplete: 'off', 'data-testid': 'endpoint-key' });
  const [model, modelField] = field('Model id', { placeholder: 'model-name', 'data-testid': 'endpoint-model' });
  const save = h('button', { class: 'btn btn-primary', 'data-testid': 'save-endpoint' }, 'Add endpoint');
  save.addEventListener('click', async () => {
    save.disabled = true;
    try {
      const r = await call('llm.saveProvider', { id: id.value, baseURL: url.value, apiKey: key.value, model: model.value });
      toast('Endpoint added; choose it as the default model to use it.', 'info');
      render(body, r);
    } catch (e) { toast(e.message); save.disabled = false; }
  });
  return h('div', { class: 'card', 'data-testid': 'new-endpoint' },
    h('div', { class: 'card-head' }, h('h2', null, 'Add an OpenAI-compatible endpoint')),
    idField, urlField, keyField, modelField,
    h('div', { class: 'card-actions' }, save));
}
