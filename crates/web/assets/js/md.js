// Markdown for answers, plans and questions: parsed by marked's lexer (CommonMark + GFM:
// tables, task lists, strikethrough, autolinks) and turned into DOM nodes here, token by
// token. Nothing is ever assigned as HTML: raw HTML in a model's text shows as text, links
// open only for http(s) and mailto addresses, and images become links (a remote picture
// would tell a third party that the page was opened).

import { h } from './util.js';
import { highlight } from './hl.js';
import { Marked } from './vendor/marked.js';

// `2*3*4` in prose is arithmetic, not "2, italic 3, 4": a run of digits joined by `*` stays
// literal (CommonMark alone would emphasise the middle number).
const arithmetic = {
  name: 'arithmetic',
  level: 'inline',
  start(src) {
    const m = /\d\*\d/.exec(src);
    return m ? m.index : undefined;
  },
  tokenizer(src) {
    const m = /^\d+(?:\*\d+)+/.exec(src);
    if (m) return { type: 'text', raw: m[0], text: m[0] };
    return undefined;
  },
};

const parser = new Marked({ gfm: true, breaks: true, extensions: [arithmetic] });

export function codeBlock(code, lang) {
  const pre = h('pre', { class: 'code', 'data-lang': lang || '' });
  const c = h('code', null);
  highlight(c, code, lang);
  pre.append(c);
  const copy = h('button', { class: 'copy', title: 'Copy', type: 'button', 'aria-label': 'Copy code' }, 'Copy');
  copy.addEventListener('click', () => {
    if (navigator.clipboard) navigator.clipboard.writeText(code).catch(() => {});
  });
  return h('div', { class: 'codewrap' }, copy, pre);
}

export function renderMarkdown(text) {
  const root = h('div', { class: 'md' });
  let tokens;
  try {
    tokens = parser.lexer(String(text));
  } catch (e) {
    // The lexer never should throw; if it does, the text is still shown, unformatted.
    root.append(h('p', null, String(text)));
    return root;
  }
  blocks(root, tokens);
  return root;
}

function blocks(parent, tokens) {
  for (const t of tokens || []) {
    const node = block(t);
    if (node) parent.append(node);
  }
}

function block(t) {
  switch (t.type) {
    case 'space':
    case 'def':
      return null;
    case 'code': {
      const lang = (t.lang || '').trim().split(/\s+/)[0].toLowerCase();
      return codeBlock(t.text.replace(/\n$/, ''), lang);
    }
    case 'heading':
      return h(`h${Math.min(6, t.depth + 2)}`, null, inline(t.tokens));
    case 'hr':
      return h('hr');
    case 'blockquote': {
      const q = h('blockquote');
      blocks(q, t.tokens);
      return q;
    }
    case 'list': {
      const attrs = t.ordered && t.start !== '' && t.start !== 1 ? { start: String(t.start) } : null;
      const list = h(t.ordered ? 'ol' : 'ul', attrs);
      for (const item of t.items) list.append(listItem(item));
      return list;
    }
    case 'paragraph':
      return h('p', null, inline(t.tokens));
    case 'table':
      return table(t);
    case 'html':
      // Raw HTML is text here, kept as the model wrote it.
      return h(t.block ? 'pre' : 'p', { class: 'md-raw' }, t.text);
    case 'text':
      return h('p', null, t.tokens ? inline(t.tokens) : entities(t.text));
    default:
      return t.raw ? h('p', null, t.raw) : null;
  }
}

function listItem(item) {
  const li = h('li', item.task ? { class: 'task' } : null);
  for (const t of item.tokens || []) {
    if (t.type === 'checkbox') {
      li.append(h('input', { type: 'checkbox', disabled: true, checked: !!t.checked, 'aria-label': t.checked ? 'done' : 'not done' }), ' ');
    } else if (t.type === 'text' && !item.loose) {
      li.append(...inline(t.tokens || [{ type: 'text', text: t.text }]));
    } else {
      const node = block(t);
      if (node) li.append(node);
    }
  }
  return li;
}

function table(t) {
  const cell = (tag, c) => {
    return h(tag, c.align ? { class: `align-${c.align}` } : null, inline(c.tokens));
  };
  return h('div', { class: 'mdtable-wrap' },
    h('table', { class: 'mdtable' },
      h('thead', null, h('tr', null, t.header.map((c) => cell('th', c)))),
      h('tbody', null, t.rows.map((r) => h('tr', null, r.map((c) => cell('td', c)))))));
}

function inline(tokens) {
  const out = [];
  for (const t of tokens || []) {
    switch (t.type) {
      case 'text':
        out.push(...(t.tokens ? inline(t.tokens) : [entities(t.text)]));
        break;
      case 'escape':
        out.push(t.text);
        break;
      case 'strong': out.push(h('strong', null, inline(t.tokens))); break;
      case 'em': out.push(h('em', null, inline(t.tokens))); break;
      case 'del': out.push(h('del', null, inline(t.tokens))); break;
      case 'codespan': out.push(h('code', { class: 'inline' }, t.text)); break;
      case 'br': out.push(h('br')); break;
      case 'link': out.push(link(t.href, inline(t.tokens))); break;
      case 'image': out.push(link(t.href, `[image: ${t.text || t.href}]`)); break;
      case 'html': out.push(t.text); break;
      default: if (t.raw) out.push(t.raw);
    }
  }
  return out;
}

// Character references (`&amp;`, `&#8594;`) mean their character, as CommonMark says:
// numeric ones always, named ones for the names models actually write; any other stays as
// written.
const NAMED = {
  amp: '&', lt: '<', gt: '>', quot: '"', apos: "'", nbsp: '\u00a0', copy: '\u00a9', reg: '\u00ae',
  trade: '\u2122', hellip: '\u2026', mdash: '\u2014', ndash: '\u2013', rarr: '\u2192', larr: '\u2190',
  harr: '\u2194', uarr: '\u2191', darr: '\u2193', times: '\u00d7', divide: '\u00f7', plusmn: '\u00b1',
  le: '\u2264', ge: '\u2265', ne: '\u2260', deg: '\u00b0', middot: '\u00b7', bull: '\u2022',
  laquo: '\u00ab', raquo: '\u00bb', lsquo: '\u2018', rsquo: '\u2019', ldquo: '\u201c', rdquo: '\u201d',
  check: '\u2713', infin: '\u221e', sect: '\u00a7', para: '\u00b6', euro: '\u20ac', pound: '\u00a3',
};
function entities(s) {
  if (!s || s.indexOf('&') < 0) return s || '';
  return s.replace(/&(?:#(\d{1,7})|#[xX]([\da-fA-F]{1,6})|([A-Za-z][A-Za-z\d]{1,31}));/g, (m, dec, hex, name) => {
    if (name) return Object.prototype.hasOwnProperty.call(NAMED, name) ? NAMED[name] : m;
    const cp = dec ? parseInt(dec, 10) : parseInt(hex, 16);
    return cp > 0 && cp <= 0x10ffff && (cp < 0xd800 || cp > 0xdfff) ? String.fromCodePoint(cp) : '\ufffd';
  });
}

function link(href, content) {
  if (!/^(https?:\/\/|mailto:)/i.test(href || '')) return h('span', null, content);
  return h('a', { href, target: '_blank', rel: 'noopener noreferrer' }, content);
}
