// A small regex tokenizer for code blocks: comments, strings, numbers, keywords and
// literals for the languages it knows. A fence without a language, or with one it does not
// know, stays plain text: guessing paints prose, logs and shell output as if they were C.

const KW = {
  js: 'async await break case catch class const continue debugger default delete do else export extends finally for from function if import in instanceof let new of return static super switch this throw try typeof var void while with yield',
  ts: 'abstract any as async await boolean break case catch class const continue declare default do else enum export extends finally for from function if implements import in infer instanceof interface is keyof let module namespace never new number of private protected public readonly return string super switch this throw try type typeof unknown var void while yield',
  rust: 'as async await break const continue crate dyn else enum extern fn for if impl in let loop match mod move mut pub ref return self Self static struct super trait type unsafe use where while',
  python: 'and as assert async await break class continue def del elif else except finally for from global if import in is lambda nonlocal not or pass raise return try while with yield',
  go: 'break case chan const continue default defer else fallthrough for func go goto if import interface map package range return select struct switch type var',
  c: 'auto break case char const continue default do double else enum extern float for goto if inline int long register return short signed sizeof static struct switch typedef union unsigned void volatile while class namespace template typename public private protected virtual override new delete using',
  java: 'abstract boolean break byte case catch char class const continue default do double else enum extends final finally float for if implements import instanceof int interface long new package private protected public return short static super switch synchronized this throw throws try void volatile while',
  sh: 'if then else elif fi for while until do done case esac in function return local export set unset echo exit cd',
  sql: 'select from where insert into values update set delete create table drop alter join left right inner outer on group by order having limit and or not null as distinct union',
};
const ALIAS = { javascript: 'js', jsx: 'js', mjs: 'js', tsx: 'ts', typescript: 'ts', rs: 'rust', py: 'python', golang: 'go', cpp: 'c', 'c++': 'c', h: 'c', hpp: 'c', cs: 'c', csharp: 'c', kotlin: 'java', swift: 'c', bash: 'sh', shell: 'sh', zsh: 'sh', console: 'sh' };
// Languages with comments, strings and numbers but no keyword list of their own.
const BARE = new Set(['json', 'yaml', 'yml', 'toml', 'ini', 'ruby', 'rb', 'r', 'css', 'scss', 'php', 'lua', 'dockerfile', 'makefile', 'nix', 'zig', 'scala', 'dart', 'proto', 'graphql']);
const HASH = new Set(['python', 'sh', 'yaml', 'yml', 'toml', 'ini', 'ruby', 'rb', 'r', 'dockerfile', 'makefile', 'nix']);
const LIT = new Set(['true', 'false', 'null', 'undefined', 'None', 'True', 'False', 'nil', 'NULL', 'nullptr']);

function rulesFor(lang) {
  const hash = HASH.has(lang);
  const sql = lang === 'sql';
  const parts = [];
  if (!hash && !sql) parts.push('(\\/\\/[^\\n]*|\\/\\*[\\s\\S]*?\\*\\/)');
  else if (sql) parts.push('(--[^\\n]*)');
  else parts.push('(#[^\\n]*)');
  parts.push('("(?:[^"\\\\\\n]|\\\\.)*"|\'(?:[^\'\\\\\\n]|\\\\.)*\'|`(?:[^`\\\\]|\\\\.)*`)');
  parts.push('(\\b\\d[\\d_]*(?:\\.\\d+)?(?:[eE][+-]?\\d+)?\\b|\\b0x[\\da-fA-F]+\\b)');
  parts.push('([A-Za-z_$][\\w$]*)');
  return new RegExp(parts.join('|'), 'g');
}

export function highlight(target, code, lang) {
  lang = ALIAS[lang] || lang || '';
  if (lang === 'diff' || lang === 'patch') return diffLines(target, code);
  if (!(Object.hasOwn(KW, lang) || BARE.has(lang)) || code.length > 200000) {
    target.textContent = code;
    return;
  }
  const kw = new Set(KW[lang] ? KW[lang].split(' ') : []);
  const re = rulesFor(lang);
  let last = 0;
  const frag = document.createDocumentFragment();
  const text = (s) => { if (s) frag.append(document.createTextNode(s)); };
  const span = (cls, s) => { const e = document.createElement('span'); e.className = cls; e.textContent = s; frag.append(e); };
  let m;
  while ((m = re.exec(code))) {
    text(code.slice(last, m.index));
    if (m[1]) span('tok-com', m[1]);
    else if (m[2]) span('tok-str', m[2]);
    else if (m[3]) span('tok-num', m[3]);
    else if (kw.has(m[4])) span('tok-kw', m[4]);
    else if (LIT.has(m[4])) span('tok-lit', m[4]);
    else text(m[4]);
    last = re.lastIndex;
  }
  text(code.slice(last));
  target.append(frag);
}

function diffLines(target, code) {
  for (const line of code.split('\n')) {
    const cls = line.startsWith('+') ? 'd-add' : line.startsWith('-') ? 'd-del' : line.startsWith('@@') ? 'd-hunk' : '';
    const e = document.createElement('span');
    if (cls) e.className = cls;
    e.textContent = `${line}\n`;
    target.append(e);
  }
}
