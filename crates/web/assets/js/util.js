// DOM and formatting helpers. Text always goes in as text nodes: nothing the server or
// the model sends is ever parsed as HTML.

export function h(tag, attrs, ...children) {
  const el = document.createElement(tag);
  if (attrs) {
    for (const [k, v] of Object.entries(attrs)) {
      if (v === undefined || v === null || v === false) continue;
      if (k === 'class') el.className = v;
      else if (k === 'text') el.textContent = v;
      else if (k.startsWith('on') && typeof v === 'function') el.addEventListener(k.slice(2), v);
      else if (k === 'dataset') Object.assign(el.dataset, v);
      else if (k === 'value') el.value = v;
      else if (v === true) el.setAttribute(k, '');
      else el.setAttribute(k, String(v));
    }
  }
  append(el, children);
  return el;
}

export function append(el, children) {
  for (const c of children.flat(Infinity)) {
    if (c === undefined || c === null || c === false) continue;
    el.append(c instanceof Node ? c : document.createTextNode(String(c)));
  }
  return el;
}

export function clear(el) {
  while (el.firstChild) el.removeChild(el.firstChild);
  return el;
}

export function fmtAgo(ms) {
  if (!ms) return '';
  const s = Math.max(0, (Date.now() - ms) / 1000);
  if (s < 45) return 'just now';
  if (s < 3600) return `${Math.round(s / 60)} min ago`;
  if (s < 86400) return `${Math.round(s / 3600)} h ago`;
  if (s < 86400 * 30) return `${Math.round(s / 86400)} d ago`;
  return new Date(ms).toISOString().slice(0, 10);
}

export function fmtTokens(n) {
  if (n === undefined || n === null) return '–';
  if (n >= 1e6) return `${(n / 1e6).toFixed(n >= 1e7 ? 0 : 1)} M`;
  if (n >= 1e3) return `${(n / 1e3).toFixed(n >= 1e4 ? 0 : 1)} k`;
  return String(n);
}

export function basename(path) {
  if (!path) return '';
  const parts = String(path).split('/').filter(Boolean);
  return parts.length ? parts[parts.length - 1] : '/';
}

let toastHost;
export function toast(message, kind = 'error') {
  toastHost = toastHost || document.getElementById('toasts');
  const t = h('div', { class: `toast toast-${kind}`, role: 'status', 'data-testid': 'toast' }, message);
  toastHost.append(t);
  setTimeout(() => t.remove(), kind === 'error' ? 8000 : 4000);
}

// A modal dialog built from content; resolves with the value passed to close().
export function dialog(title, build, { testid } = {}) {
  return new Promise((resolve) => {
    const d = h('dialog', { class: 'dialog', 'data-testid': testid || 'dialog' });
    const close = (value) => { d.close(); d.remove(); resolve(value); };
    append(d, [h('h2', null, title), build(close)]);
    d.addEventListener('cancel', (e) => { e.preventDefault(); close(undefined); });
    document.body.append(d);
    d.showModal();
    const first = d.querySelector('[autofocus], input, textarea, button');
    if (first) first.focus();
  });
}

export function confirmDialog(title, message, action, { danger = false, testid } = {}) {
  return dialog(title, (close) => h('div', null,
    h('p', null, message),
    h('div', { class: 'dialog-actions' },
      h('button', { class: 'btn', onclick: () => close(false), 'data-testid': 'dialog-cancel' }, 'Cancel'),
      h('button', { class: danger ? 'btn btn-danger' : 'btn btn-primary', onclick: () => close(true), 'data-testid': 'dialog-confirm', autofocus: true }, action)),
  ), { testid });
}

export function promptDialog(title, label, initial, action, { testid } = {}) {
  return dialog(title, (close) => {
    const input = h('input', { class: 'input', value: initial || '', 'aria-label': label, 'data-testid': 'dialog-input', autofocus: true });
    // preventDefault: the closing dialog hands focus back to the button that opened it, and
    // the same Enter must not press that button again (it reopened the dialog).
    input.addEventListener('keydown', (e) => { if (e.key === 'Enter' && !e.isComposing) { e.preventDefault(); close(input.value); } });
    return h('div', null,
      h('label', { class: 'field' }, h('span', null, label), input),
      h('div', { class: 'dialog-actions' },
        h('button', { class: 'btn', onclick: () => close(undefined), 'data-testid': 'dialog-cancel' }, 'Cancel'),
        h('button', { class: 'btn btn-primary', onclick: () => close(input.value), 'data-testid': 'dialog-confirm' }, action)));
  }, { testid });
}

export function icon(name) {
  const paths = {
    plus: 'M12 5v14M5 12h14',
    stop: 'M7 7h10v10H7z',
    send: 'M4 12l16-8-6 16-2-7z',
    gear: 'M12 15a3 3 0 1 0 0-6 3 3 0 0 0 0 6zM19 12l2-1-1-3-2 .5-1.5-1.5.5-2-3-1-1 2h-2l-1-2-3 1 .5 2L6 8.5 4 8 3 11l2 1v0l-2 1 1 3 2-.5 1.5 1.5-.5 2 3 1 1-2h2l1 2 3-1-.5-2 1.5-1.5 2 .5 1-3z',
    folder: 'M3 6h6l2 2h10v11H3z',
    book: 'M5 4h9a3 3 0 0 1 3 3v13H8a3 3 0 0 1-3-3zM5 17a3 3 0 0 1 3-3h9',
  };
  const svg = document.createElementNS('http://www.w3.org/2000/svg', 'svg');
  svg.setAttribute('viewBox', '0 0 24 24');
  svg.setAttribute('class', 'icon');
  svg.setAttribute('aria-hidden', 'true');
  const p = document.createElementNS('http://www.w3.org/2000/svg', 'path');
  p.setAttribute('d', paths[name] || '');
  svg.append(p);
  return svg;
}
