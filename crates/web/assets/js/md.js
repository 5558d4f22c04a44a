// A Markdown subset rendered straight to DOM nodes (never through HTML parsing):
// fenced code (highlighted), headings, lists, block quotes, rules, tables-as-text,
// paragraphs; inline code, bold, italics, strikethrough and http(s) links.

import { h } from './util.js';
import { highlight } from './hl.js';

export function codeBlock(code, lang) {
  const pre = h('pre', { class: 'code', 'data-lang': lang || '' });
  const c = h('code', null);
  highlight(c, code, lang);
  pre.append(c);
  const copy = h('button', { class: 'copy', title: 'Copy', type: 'button' }, 'Copy');
  copy.addEventListener('click', () => {
    if (navigator.clipboard) navigator.clipboard.writeText(code).catch(() => {});
  });
  return h('div', { class: 'codewrap' }, copy, pre);
}

export function renderMarkdown(text) {
  const root = h('div', { class: 'md' });
  const lines = String(text).replace(/\r\n?/g, '\n').split('\n');
  let i = 0;
  let para = [];
  const flush = () => {
    if (para.length) root.append(h('p', null, inline(para.join('\n'))));
    para = [];
  };
  while (i < lines.length) {
    const line = lines[i];
    const fence = /^\s*(`{3,}|~{3,})\s*([\w+#.-]*)/.exec(line);
    if (fence) {
      flush();
      const marker = fence[1];
      const body = [];
      i++;
      while (i < lines.length && !lines[i].trim().startsWith(marker)) body.push(lines[i++]);
      i++;
      root.append(codeBlock(body.join('\n'), fence[2].toLowerCase()));
      continue;
    }
    const heading = /^(#{1,6})\s+(.*)$/.exec(line);
    if (heading) {
      flush();
      root.append(h(`h${Math.min(6, heading[1].length + 2)}`, null, inline(heading[2])));
      i++;
      continue;
    }
    if (/^\s*([-*_])(\s*\1){2,}\s*$/.test(line)) { flush(); root.append(h('hr')); i++; continue; }
    if (/^\s*>/.test(line)) {
      flush();
      const body = [];
      while (i < lines.length && /^\s*>/.test(lines[i])) body.push(lines[i++].replace(/^\s*>\s?/, ''));
      root.append(h('blockquote', null, renderMarkdown(body.join('\n'))));
      continue;
    }
    const item = /^(\s*)([-*+]|\d+[.)])\s+(.*)$/.exec(line);
    if (item) {
      flush();
      const ordered = /\d/.test(item[2]);
      const list = h(ordered ? 'ol' : 'ul');
      while (i < lines.length) {
        const m = /^(\s*)([-*+]|\d+[.)])\s+(.*)$/.exec(lines[i]);
        if (!m) {
          if (/^\s{2,}\S/.test(lines[i]) && list.lastChild) { list.lastChild.append(' ', inline(lines[i].trim())); i++; continue; }
          break;
        }
        const task = /^\[([ xX])\]\s+(.*)$/.exec(m[3]);
        const li = task
          ? h('li', { class: 'task' }, h('input', { type: 'checkbox', disabled: true, checked: task[1] !== ' ' }), ' ', inline(task[2]))
          : h('li', null, inline(m[3]));
        list.append(li);
        i++;
      }
      root.append(list);
      continue;
    }
    if (/^\s*\|.*\|\s*$/.test(line)) {
      flush();
      const rows = [];
      while (i < lines.length && /^\s*\|.*\|\s*$/.test(lines[i])) rows.push(lines[i++]);
      const table = h('table', { class: 'mdtable' });
      for (const r of rows) {
        if (/^\s*\|[\s:|-]+\|\s*$/.test(r)) continue;
        const cells = r.trim().slice(1, -1).split('|');
        table.append(h('tr', null, cells.map((c) => h('td', null, inline(c.trim())))));
      }
      root.append(table);
      continue;
    }
    if (!line.trim()) { flush(); i++; continue; }
    para.push(line);
    i++;
  }
  flush();
  return root;
}

const INLINE = /(`+)([\s\S]*?)\1|\*\*([\s\S]+?)\*\*|__([\s\S]+?)__|\*([^*\s][^*]*?)\*|_([^_\s][^_]*?)_|~~([\s\S]+?)~~|\[([^\]]+)\]\(([^)\s]+)\)|(https?:\/\/[^\s<>()]+[^\s<>().,;:!?'"])/;

export function inline(text) {
  const out = [];
  let rest = String(text);
  while (rest) {
    const m = INLINE.exec(rest);
    if (!m) { out.push(withBreaks(rest)); break; }
    if (m.index) out.push(withBreaks(rest.slice(0, m.index)));
    if (m[1]) out.push(h('code', { class: 'inline' }, m[2]));
    else if (m[3] || m[4]) out.push(h('strong', null, inline(m[3] || m[4])));
    else if (m[5] || m[6]) out.push(h('em', null, inline(m[5] || m[6])));
    else if (m[7]) out.push(h('del', null, inline(m[7])));
    else if (m[8]) out.push(link(m[9], inline(m[8])));
    else if (m[10]) out.push(link(m[10], m[10]));
    rest = rest.slice(m.index + m[0].length);
  }
  return out;
}

function withBreaks(text) {
  const parts = text.split('\n');
  const out = [];
  parts.forEach((p, i) => { if (i) out.push(h('br')); if (p) out.push(p); });
  return out;
}

function link(href, content) {
  if (!/^https?:\/\//i.test(href)) return h('span', null, content);
  return h('a', { href, target: '_blank', rel: 'noopener noreferrer' }, content);
}
