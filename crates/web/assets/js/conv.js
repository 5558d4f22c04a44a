// The conversation of one session, rendered incrementally from its durable events
// (snapshot, then contiguous `events` batches) plus live state (status, inbox, approvals,
// questions, tool output). Each event is applied once: anything at or below the cursor is skipped.

import { h, append, clear, fmtTokens, basename, toast, confirmDialog, promptDialog, dialog } from './util.js';
import { call, respond, respondQuestion, Stream } from './api.js';
import { renderMarkdown, codeBlock } from './md.js';
import { state, refreshSoon, sessionRow } from './store.js';
import { DraftImages, acceptImages, promptContent, gallery, releaseSession } from './images.js';

const dsh = (window.__dsh = window.__dsh || { cursors: {}, renderMs: null, ready: false, seqs: {} });

function parseArgs(text) {
  if (typeof text !== 'string') return text || {};
  try { return JSON.parse(text); } catch (e) { return text; }
}

function summaryOf(name, args) {
  if (!args || typeof args !== 'object') return '';
  if (name === 'bash') return args.command || '';
  if (name.startsWith('schedule_')) return args.title || args.id || '';
  return args.file_path || args.path || args.pattern || args.query || args.url || '';
}

function textOfBlocks(blocks) {
  return (blocks || []).map((b) => (b.type === 'text' ? b.text : '')).join('');
}

// Line diff of one hunk: a common-subsequence table when small, else all − then all +.
function diffHunk(oldText, newText) {
  const a = oldText === null || oldText === undefined ? [] : oldText.split('\n');
  const b = newText === null || newText === undefined ? [] : newText.split('\n');
  const out = [];
  if (a.length * b.length > 160000) {
    a.forEach((l) => out.push(['-', l]));
    b.forEach((l) => out.push(['+', l]));
    return out;
  }
  const n = a.length; const m = b.length;
  const t = Array.from({ length: n + 1 }, () => new Uint16Array(m + 1));
  for (let i = n - 1; i >= 0; i--) for (let j = m - 1; j >= 0; j--) t[i][j] = a[i] === b[j] ? t[i + 1][j + 1] + 1 : Math.max(t[i + 1][j], t[i][j + 1]);
  let i = 0; let j = 0;
  while (i < n && j < m) {
    if (a[i] === b[j]) { out.push([' ', a[i]]); i++; j++; } else if (t[i + 1][j] >= t[i][j + 1]) out.push(['-', a[i++]]); else out.push(['+', b[j++]]);
  }
  while (i < n) out.push(['-', a[i++]]);
  while (j < m) out.push(['+', b[j++]]);
  return out;
}

export function renderDiffs(diffs) {
  const box = h('div', { class: 'diff', 'data-testid': 'diff' });
  let lastPath = null;
  for (const d of diffs) {
    if (d.path !== lastPath) { box.append(h('div', { class: 'diff-path' }, d.path)); lastPath = d.path; }
    const pre = h('pre', { class: 'diff-hunk' });
    for (const [tag, line] of diffHunk(d.oldText, d.newText)) {
      pre.append(h('span', { class: tag === '+' ? 'd-add' : tag === '-' ? 'd-del' : 'd-ctx' }, `${tag} ${line}\n`));
    }
    box.append(pre);
  }
  return box;
}

// A unified diff as coloured lines (text only).
function unifiedDiff(text) {
  const pre = h('pre', { class: 'diff-hunk', 'data-testid': 'changed-diff' });
  for (const line of String(text || '').split('\n')) {
    if (/^(diff --git|index |--- |\+\+\+ )/.test(line)) continue;
    const cls = line.startsWith('+') ? 'd-add' : line.startsWith('-') ? 'd-del' : line.startsWith('@@') ? 'd-hunk' : '';
    pre.append(h('span', cls ? { class: cls } : null, line || ' '));
  }
  return pre;
}

// What a reminder message says: the reminder text(s) inside the frame dsh web wraps them in.
function reminderTexts(text) {
  for (const line of text.split('\n')) {
    try {
      if (line.startsWith('reminder: ')) return [String(JSON.parse(line.slice(10)))];
      if (line.startsWith('reminders: ')) return JSON.parse(line.slice(11)).map((r) => String(r.reminder));
    } catch (e) { break; }
  }
  return [text];
}

// A reminder tool's result as a line a person reads (the raw JSON stays one click away).
function reminderResult(text) {
  let v;
  try { v = JSON.parse(text); } catch (e) { return null; }
  const raw = h('details', null, h('summary', null, 'Result'), h('pre', { class: 'result-text' }, text));
  const line = (t) => h('div', { class: 'reminder-card', 'data-testid': 'reminder-card' }, t, raw);
  if (Array.isArray(v)) return line(v.length ? `Reminders pending: ${v.map((r) => r.title).join(', ')}` : 'No pending reminders');
  if (!v || typeof v !== 'object') return null;
  if (v.kind && v.title) return line(`Reminder: ${v.title} · ${ruleText(v)} · next ${new Date(v.scheduledAt).toLocaleString()}`);
  if (v.deleted === true) return line('Reminder deleted');
  if (v.code) return line(`Reminder not changed: ${v.message || v.code}`);
  return null;
}

const WEEKDAYS = ['', 'Mon', 'Tue', 'Wed', 'Thu', 'Fri', 'Sat', 'Sun'];

// A reminder's rule in a few words.
function ruleText(t) {
  const clock = (x) => String(x || '').slice(0, 5);
  switch (t.kind) {
    case 'after': case 'at': return 'once';
    case 'every': return t.everySeconds % 3600 === 0 ? `every ${t.everySeconds / 3600} h` : t.everySeconds % 60 === 0 ? `every ${t.everySeconds / 60} min` : `every ${t.everySeconds} s`;
    case 'daily': return `daily ${clock(t.time)} ${t.timeZone}`;
    case 'weekly': return `${(t.weekdays || []).map((d) => WEEKDAYS[d]).join(', ')} ${clock(t.time)} ${t.timeZone}`;
    case 'cron': return `cron ${t.expression} ${t.timeZone}`;
    default: return t.kind || '';
  }
}

class ToolCard {
  constructor(callId, name) {
    this.callId = callId;
    this.name = name || 'tool';
    this.nameEl = h('span', { class: 'tool-name' }, this.name);
    this.summaryEl = h('span', { class: 'tool-summary', 'data-testid': 'tool-summary' });
    this.stateEl = h('span', { class: 'tool-state' }, 'pending');
    this.argsEl = h('pre', { class: 'tool-args-body' });
    this.outputEl = h('pre', { class: 'tool-output hidden', 'data-testid': 'tool-output' });
    this.resultEl = h('div', { class: 'tool-result hidden', 'data-testid': 'tool-result' });
    this.el = h('div', { class: 'tool-card', 'data-testid': 'tool-card', 'data-tool': this.name, 'data-call': callId, 'data-state': 'pending' },
      h('div', { class: 'tool-head' }, this.nameEl, this.summaryEl, this.stateEl),
      h('details', { class: 'tool-args' }, h('summary', null, 'Arguments'), this.argsEl),
      this.outputEl,
      this.resultEl);
  }

  setName(name) {
    if (!name || name === this.name) return;
    this.name = name;
    this.nameEl.textContent = name;
    this.el.dataset.tool = name;
  }

  setArgs(raw) {
    const args = parseArgs(raw);
    this.args = args;
    this.argsEl.textContent = typeof args === 'string' ? args : JSON.stringify(args, null, 2);
    const s = summaryOf(this.name, args);
    this.summaryEl.textContent = s;
    if (args && typeof args === 'object' && (args.justification || args.sandbox_permissions)) {
      this.el.dataset.escalation = args.sandbox_permissions || '';
    }
  }

  setState(st, label) {
    this.el.dataset.state = st;
    this.stateEl.textContent = label || st;
  }

  appendOutput(text) {
    if (this.el.dataset.state === 'done' || this.el.dataset.state === 'error') return;
    this.outputEl.classList.remove('hidden');
    this.outputEl.append(text);
    if (this.outputEl.textContent.length > 65536) this.outputEl.textContent = this.outputEl.textContent.slice(-65536);
    this.outputEl.scrollTop = this.outputEl.scrollHeight;
  }

  setOutput(text) {
    this.outputEl.textContent = '';
    if (text) this.appendOutput(text);
  }

  setResult(e) {
    const block = (e.data.message && e.data.message.content && e.data.message.content[0]) || {};
    const isError = !!block.isError || !!e.data.error;
    const text = textOfBlocks(block.content);
    this.outputEl.classList.add('hidden');
    this.resultEl.classList.remove('hidden');
    clear(this.resultEl);
    this.resultEl.dataset.seq = e.seq;
    const reminder = !isError && this.name.startsWith('schedule_') ? reminderResult(text) : null;
    this.resultEl.append(reminder || h('pre', { class: isError ? 'result-text error' : 'result-text' }, text || (isError ? 'failed' : '(no output)')));
    const meta = e.data.meta;
    if (meta && Array.isArray(meta.diffs) && meta.diffs.length) this.resultEl.append(renderDiffs(meta.diffs));
    this.setState(isError ? 'error' : 'done', isError ? 'failed' : 'done');
    this.el.classList.toggle('is-error', isError);
  }
}

// Text waiting for the composer of a session about to open (edit and resend).
const drafts = new Map();

export class Conversation {
  constructor(sessionId, { onClose } = {}) {
    this.id = sessionId;
    this.onClose = onClose;
    this.titleEl = h('h1', { class: 'conv-title', 'data-testid': 'conv-title' }, 'Untitled');
    this.cwdEl = h('div', { class: 'conv-cwd', 'data-testid': 'conv-cwd' });
    this.meterBar = h('div', { class: 'meter-bar' });
    this.meterText = h('span', { class: 'meter-text' }, '–');
    this.meter = h('div', { class: 'meter', 'data-testid': 'usage', title: 'Context window use' }, h('div', { class: 'meter-track' }, this.meterBar), this.meterText);
    this.archiveBtn = h('button', { class: 'btn btn-small', 'data-testid': 'archive', onclick: () => this.archive(true) }, 'Archive');
    this.restoreBtn = h('button', { class: 'btn btn-small hidden', 'data-testid': 'restore', onclick: () => this.archive(false) }, 'Restore');
    this.modelSel = h('select', { class: 'select select-small', 'data-testid': 'model-select', 'aria-label': 'Model for the next message', title: 'Model for the next message' });
    this.effortSel = h('select', { class: 'select select-small hidden', 'data-testid': 'effort-select', 'aria-label': 'Reasoning effort', title: 'Reasoning effort' });
    this.modeSel = h('select', { class: 'select select-small hidden', 'data-testid': 'mode-select', 'aria-label': 'Permission mode', title: 'Permission mode: what the agent may do without asking' });
    this.modelSel.addEventListener('change', () => {
      const [provider, model] = JSON.parse(this.modelSel.value);
      this.choose('session.setModel', { provider, model });
    });
    this.effortSel.addEventListener('change', () => this.choose('session.setEffort', { effort: this.effortSel.value }));
    this.modeSel.addEventListener('change', () => this.choose('session.setMode', { mode: this.modeSel.value }));
    this.presetSel = h('select', { class: 'select select-small hidden', 'data-testid': 'preset-select', 'aria-label': 'Agent preset (chosen before the first message)' });
    this.presetSel.addEventListener('change', async () => {
      try { await call('agentPresets.select', { sessionId: this.id, agentPreset: this.presetSel.value }); } catch (e) { toast(e.message); }
      this.loadOptions();
    });
    const controls = h('div', { class: 'conv-controls', 'data-testid': 'conv-controls' }, this.presetSel, this.modelSel, this.effortSel, this.modeSel);
    const actions = h('div', { class: 'conv-actions' },
      h('button', { class: 'btn btn-small', 'data-testid': 'rename', onclick: () => this.rename() }, 'Rename'),
      h('button', { class: 'btn btn-small', 'data-testid': 'fork', onclick: () => this.fork(null) }, 'Fork'),
      h('button', { class: 'btn btn-small', 'data-testid': 'export', title: 'Download this session as a Markdown transcript or its event log', onclick: () => this.exportDialog() }, 'Export'),
      this.archiveBtn, this.restoreBtn,
      h('button', { class: 'btn btn-small btn-danger', 'data-testid': 'delete', onclick: () => this.remove() }, 'Delete'));
    this.banner = h('div', { class: 'banner hidden', 'data-testid': 'agent-error', role: 'alert' });
    this.body = h('div', { class: 'conv-body', 'data-testid': 'conv-body' });
    this.planList = h('ol', { class: 'plan-list' });
    this.planSection = h('section', { class: 'hidden', 'data-testid': 'plan' }, h('h3', null, 'Plan'), this.planList);
    this.outlineList = h('ol', { class: 'outline-list' });
    this.outlineSection = h('nav', { class: 'hidden', 'data-testid': 'outline', 'aria-label': 'Turns of this conversation' }, h('h3', null, 'Turns'), this.outlineList);
    this.remindList = h('ul', { class: 'remind-list' });
    this.remindSection = h('section', { class: 'hidden', 'data-testid': 'reminders', 'aria-label': 'Reminders of this session' }, h('h3', null, 'Reminders'), this.remindList);
    this.plan = h('aside', { class: 'plan hidden', 'data-testid': 'rail' }, this.planSection, this.remindSection, this.outlineSection);
    this.approvalsEl = h('div', { class: 'approvals', 'data-testid': 'approvals' });
    this.questionsEl = h('div', { class: 'approvals', 'data-testid': 'questions' });
    this.questionCards = new Map();
    this.waiting = { approvals: 0, questions: 0, announced: 0 };
    this.liveRegion = h('div', { class: 'sr-only', 'aria-live': 'polite', 'data-testid': 'live-region' });
    this.queueEl = h('div', { class: 'queue', 'data-testid': 'queue' });
    this.input = h('textarea', { class: 'composer-input', rows: 3, placeholder: 'Message dsh… (Enter to send, Shift+Enter for a new line; paste or drop images)', 'data-testid': 'composer-input', 'aria-label': 'Message' });
    this.sendBtn = h('button', { class: 'btn btn-primary', 'data-testid': 'send', onclick: () => this.send() }, 'Send');
    this.stopBtn = h('button', { class: 'btn btn-danger hidden', 'data-testid': 'stop', onclick: () => this.stop() }, 'Stop');
    // While a turn runs, Send steers it (the message joins the running turn); Queue keeps
    // the message for a turn of its own after this one (Alt+Enter).
    this.queueBtn = h('button', { class: 'btn hidden', 'data-testid': 'queue-send', title: 'Send after the running turn, as a turn of its own (Alt+Enter)', onclick: () => this.send('queue') }, 'Queue');
    this.composerNote = h('div', { class: 'composer-note', 'data-testid': 'composer-note' });
    this.slash = slashMenu(this.input, () => this.commandList());
    this.mention = fileMenu(this.input, sessionId);
    this.input.addEventListener('keydown', (e) => {
      if (this.slash.key(e) || this.mention.key(e)) return;
      if (e.key === 'Enter' && !e.shiftKey && !e.isComposing) { e.preventDefault(); this.send(e.altKey ? 'queue' : undefined); }
    });
    this.drafts = new DraftImages();
    if (drafts.has(sessionId)) { this.input.value = drafts.get(sessionId); drafts.delete(sessionId); }
    this.composerEl = h('div', { class: 'composer', 'data-testid': 'composer' },
      h('div', { class: 'composer-field' }, this.slash.el, this.mention.el, this.drafts.el, this.input),
      h('div', { class: 'composer-buttons' }, this.stopBtn, this.queueBtn, this.sendBtn));
    acceptImages(this.composerEl, this.input, this.drafts, { say: (m) => toast(m) });
    this.el = h('section', { class: 'conv', 'data-testid': 'conversation', 'data-session': sessionId },
      h('header', { class: 'conv-head' }, h('div', { class: 'conv-titles' }, this.titleEl, this.cwdEl), controls, this.meter, actions),
      this.banner,
      h('div', { class: 'conv-main' }, this.body, this.plan),
      this.approvalsEl,
      this.questionsEl,
      this.queueEl,
      this.composerEl,
      this.composerNote,
      this.liveRegion);
    this.running = false;
    this.readOnly = false;
    this.unavailable = null;
    this.followEnd();
    this.reset();
    this.stream = new Stream(sessionId, {
      snapshot: (d) => this.snapshot(d),
      events: (list) => this.apply(list),
      live: (d) => this.live(d),
      status: (d) => this.setRunning(d.running),
      queue: (d) => this.setQueue(d.items),
      approvals: (d) => this.setApprovals(d.items),
      questions: (d) => this.setQuestions(d.items),
      output: (d) => this.output(d.callId, d.text),
      agentError: (d) => this.showError(d.message),
      sessionError: (d) => this.sessionError(d),
      host: () => refreshSoon(),
      shutdown: () => { state.stopped = true; this.showError('dsh web stopped; restart it and reopen the printed URL.'); },
    });
  }

  destroy() {
    document.title = 'dsh';
    this.stream.close();
    this.drafts.clear();
    releaseSession(this.id);
    delete dsh.cursors[this.id];
  }

  reset() {
    clear(this.body);
    this.next = 0;
    this.turns = new Map();
    this.steps = new Map();
    this.cards = new Map();
    this.asked = new Map();
    this.outputs = {};
    this.usage = null;
    this.contextWindow = null;
    this.todos = null;
    this.answeredBy = new Map();
    this.changes = new Map(); // turn → Map(path → {add, del})
    this.steps_ = new Map(); // turn → [{step, start, end, usage}]
    this.turnUser = new Map(); // turn → the user's text
    this.turnEnds = new Map(); // turn → seq of its turn/end
    this.compactions = new Map();
    this.lastTurnEl = null;
    this.currentTurn = null;
    this.updateMeter();
    this.renderPlan();
  }

  // ---- stream frames ------------------------------------------------------------------

  snapshot(d) {
    const t0 = performance.now();
    performance.mark('dsh:snapshot-received');
    this.reset();
    this.readOnly = d.readOnly;
    this.unavailable = null;
    const frag = document.createDocumentFragment();
    this.target = frag;
    this.applyEvents(d.events);
    this.target = null;
    this.body.append(frag);
    this.refreshComposer();
    this.scrollToEnd(true);
    requestAnimationFrame(() => this.scrollToEnd(true));
    this.renderOutline();
    this.loadOptions();
    this.loadReminders();
    this.header();
    dsh.cursors[this.id] = this.next;
    requestAnimationFrame(() => {
      dsh.renderMs = performance.now() - t0;
      try { performance.measure('dsh:render', 'dsh:snapshot-received'); } catch (e) { /* marks cleared */ }
      dsh.ready = true;
    });
  }

  apply(list) {
    this.applyEvents(list);
    dsh.cursors[this.id] = this.next;
  }

  applyEvents(list) {
    for (const e of list) {
      if (e.seq < this.next) continue; // already applied
      this.next = e.seq + 1;
      try { this.event(e); } catch (err) { console.error('dsh: cannot render event', e.seq, e.type, err); }
    }
  }

  live(d) {
    this.setRunning(d.running);
    this.setQueue(d.queue || []);
    this.setApprovals(d.approvals || []);
    this.setQuestions(d.questions || []);
    this.outputs = d.outputs || {};
    for (const [callId, text] of Object.entries(this.outputs)) { const c = this.cards.get(callId); if (c) c.setOutput(text); }
    if (d.error) this.showError(d.error);
    else if (!this.unavailable) this.hideError();
  }

  output(callId, text) {
    this.outputs[callId] = (this.outputs[callId] || '') + text;
    const card = this.cards.get(callId);
    if (card) { card.setState('running', 'running'); card.appendOutput(text); }
  }

  sessionError(d) {
    this.unavailable = d.message;
    this.showError(d.message);
    this.refreshComposer();
  }

  // ---- events -------------------------------------------------------------------------

  put(el) {
    (this.target || this.body).append(el);
  }

  turnEl(turn) {
    let t = this.turns.get(turn);
    if (!t) {
      t = h('div', { class: 'turn', 'data-turn': turn, 'data-testid': 'turn' });
      this.turns.set(turn, t);
      this.put(t);
    }
    return t;
  }

  container(turn) {
    if (turn === undefined || turn === null) turn = this.currentTurn;
    if (turn === undefined || turn === null) return this.target || this.body;
    return this.turnEl(turn);
  }

  step(turn, step) {
    const key = `${turn}:${step}`;
    let s = this.steps.get(key);
    if (!s) {
      const el = h('div', { class: 'step', 'data-step': step });
      s = { el, streams: new Map(), assistant: h('div', { class: 'assistant' }) };
      el.append(s.assistant);
      this.steps.set(key, s);
      this.container(turn).append(el);
    }
    return s;
  }

  card(callId, name) {
    let c = this.cards.get(callId);
    if (!c) {
      c = new ToolCard(callId, name);
      this.cards.set(callId, c);
      if (this.outputs[callId]) c.setOutput(this.outputs[callId]);
    } else c.setName(name);
    return c;
  }

  event(e) {
    const d = e.data || {};
    switch (e.type) {
      case 'turn/start':
        // A new turn clears the last turn's error banner (a 401 fixed since, a server back up).
        if (!this.target && !this.unavailable) this.hideError();
        this.currentTurn = d.turn;
        this.turnEl(d.turn);
        // The agent preset is fixed from the first turn on.
        if (!this.presetSel.disabled && !this.presetSel.classList.contains('hidden')) {
          this.presetSel.disabled = true;
          this.presetSel.title = 'The agent preset is fixed once the session has started';
        }
        break;
      case 'user/message': this.userMessage(e, d); break;
      case 'assistant/chunk': this.chunk(d); break;
      case 'assistant/message': this.assistantMessage(e, d); break;
      case 'tool/call': {
        const c = this.card(d.callId, d.name);
        c.setArgs(d.arguments);
        if (!c.el.isConnected && !c.el.parentNode) this.step(d.turn, d.step).assistant.append(c.el);
        if (c.el.dataset.state === 'pending') c.setState('running', 'running');
        break;
      }
      case 'tool/result': {
        const m = d.message || {};
        const callId = (m.source && m.source.callId) || (m.content && m.content[0] && m.content[0].toolCallId);
        const c = this.card(callId, undefined);
        if (!c.el.parentNode) this.step(d.turn, d.step).assistant.append(c.el);
        c.setResult(e);
        if (c.name.startsWith('schedule_')) this.reloadRemindersSoon();
        delete this.outputs[callId];
        this.noteChanges(d.turn !== undefined ? d.turn : this.currentTurn, d.meta, c);
        break;
      }
      case 'todo/write':
        this.todos = d.todos || [];
        this.renderPlan();
        break;
      case 'approval/asked': {
        this.asked.set(d.id, d.callId);
        const c = d.callId && this.cards.get(d.callId);
        if (c) c.setState('waiting', 'waiting for approval');
        break;
      }
      case 'approval/decided': {
        const c = this.cards.get(this.asked.get(d.id));
        if (c && c.el.dataset.state === 'waiting') c.setState('running', d.outcome === 'allowed-once' ? 'approved' : d.outcome);
        break;
      }
      case 'request/context':
        if (d.contextWindow) { this.contextWindow = d.contextWindow; this.updateMeter(); }
        break;
      case 'session/title':
        if (d.title) this.titleEl.textContent = d.title;
        break;
      case 'turn/end': this.turnEnd(e, d); break;
      case 'command/run': case 'command/done': this.commandEvent(e, d); break;
      case 'llm/retry': this.retryRow(e, d); break;
      case 'deliverables/presented': this.deliverables(e, d); break;
      case 'workspace/changes': this.workspaceChanges(e, d); break;
      case 'step/start': this.stepTimes(d.turn).push({ step: d.step, start: e.time, end: null, usage: null }); break;
      case 'step/end': {
        const st = this.stepTimes(d.turn).find((x) => x.step === d.step);
        if (st) st.end = e.time;
        break;
      }
      case 'compaction/start': case 'compaction/summary': case 'compaction/end': this.compactionRow(e, d); break;
      case 'llm/retry-started': {
        const row = this.body.querySelector(`[data-testid=retry][data-retry="${CSS.escape(String(d.retryId || ''))}"]`);
        if (row) { row.dataset.state = 'started'; row.querySelector('.retry-when').textContent = `attempt ${d.retry || ''} sent`; }
        break;
      }
      default: break;
    }
  }

  userMessage(e, d) {
    const text = textOfBlocks(d.content);
    const kind = d.source && d.source.kind;
    const parent = this.container(undefined);
    if (kind === 'user') {
      const images = gallery(this.id, d.content);
      // Text blocks after the first are MCP resources the message referenced.
      const texts = (d.content || []).filter((b) => b.type === 'text');
      const attached = texts.slice(1).map((b) => h('details', { class: 'context', 'data-testid': 'attached-resource' },
        h('summary', null, (b.text.split('\n')[0] || 'attached resource').replace(/:$/, '')), h('pre', null, b.text)));
      const text = texts.length ? texts[0].text : '';
      const turn = d.turn !== undefined ? d.turn : this.currentTurn;
      if (text && turn !== undefined && turn !== null && !this.turnUser.has(turn)) this.turnUser.set(turn, text);
      const edit = text && !images ? h('button', { class: 'link msg-edit', 'data-testid': 'edit-message', title: 'Edit this message and send it again in a new session (this one stays as it is)', onclick: () => this.editAndResend(turn, text) }, 'Edit') : null;
      parent.append(h('div', { class: 'msg user', 'data-testid': 'user-message', 'data-seq': e.seq },
        h('div', { class: images ? 'bubble has-images' : 'bubble' }, images, text ? h('div', { class: 'bubble-text' }, text) : null), edit, ...attached));
    } else if (kind === 'schedule') {
      // A reminder coming due: it starts a turn as a typed message would.
      const texts = reminderTexts(text);
      const turn = d.turn !== undefined ? d.turn : this.currentTurn;
      if (turn !== undefined && turn !== null && !this.turnUser.has(turn)) this.turnUser.set(turn, `Reminder: ${texts[0] || ''}`);
      parent.append(h('div', { class: 'msg user reminder', 'data-testid': 'reminder-message', 'data-seq': e.seq },
        h('div', { class: 'bubble' }, h('div', { class: 'reminder-label' }, texts.length > 1 ? 'Reminders' : 'Reminder'),
          ...texts.map((t) => h('div', { class: 'bubble-text' }, t)))));
      this.reloadRemindersSoon();
    } else {
      const src = d.source || {};
      const label = src.kind === 'time-context' ? 'clock reading' : src.form === 'snapshot' ? 'runtime context' : `note from ${src.plugin || src.kind || 'the system'}`;
      parent.append(h('details', { class: 'context', 'data-seq': e.seq }, h('summary', null, label), h('pre', null, text)));
    }
  }

  chunk(d) {
    const c = d.chunk || {};
    const s = this.step(d.turn, d.step);
    const stream = (index, type) => {
      let st = s.streams.get(index);
      if (!st) {
        if (type === 'reasoning') {
          const body = h('div', { class: 'reasoning-body' });
          const el = h('details', { class: 'reasoning streaming', open: true, 'data-testid': 'reasoning' }, h('summary', null, 'Thinking…'), body);
          st = { type, el, text: document.createTextNode(''), body };
          body.append(st.text);
        } else if (type === 'tool-call') {
          st = { type, el: null, args: '' };
        } else {
          const el = h('div', { class: 'msg assistant streaming', 'data-testid': 'assistant-text' });
          st = { type: 'text', el, text: document.createTextNode('') };
          el.append(st.text);
        }
        s.streams.set(index, st);
        if (st.el) s.assistant.append(st.el);
      }
      return st;
    };
    switch (c.type) {
      case 'block-start': stream(c.index, c.blockType); break;
      case 'text-delta': stream(c.index, 'text').text.appendData(c.text || ''); break;
      case 'reasoning-delta': stream(c.index, 'reasoning').text.appendData(c.text || ''); break;
      case 'tool-call-delta': {
        const st = stream(c.index, 'tool-call');
        if (!st.card && c.id) { st.card = this.card(c.id, c.name); s.assistant.append(st.card.el); }
        st.args += c.argumentsDelta || '';
        if (st.card) st.card.setArgs(st.args);
        break;
      }
      case 'block-end': {
        const st = s.streams.get(c.index);
        if (st && st.type === 'reasoning') { st.el.open = false; st.el.classList.remove('streaming'); st.el.querySelector('summary').textContent = 'Reasoning'; }
        break;
      }
      case 'usage': this.usage = c.usage; this.updateMeter(); break;
      default: break;
    }
  }

  assistantMessage(e, d) {
    const s = this.step(d.turn, d.step);
    const src = (d.message && d.message.source) || {};
    if (src.model) this.answeredBy.set(d.turn, src.model);
    const st = this.stepTimes(d.turn).find((x) => x.step === d.step);
    if (st && d.usage) st.usage = d.usage;
    const content = (d.message && d.message.content) || [];
    const nodes = [];
    for (const b of content) {
      if (b.type === 'text') {
        if (!b.text) continue;
        const el = h('div', { class: 'msg assistant', 'data-testid': 'assistant-text', 'data-seq': e.seq });
        el.append(renderMarkdown(b.text));
        nodes.push(el);
      } else if (b.type === 'reasoning' || b.type === 'thinking') {
        const text = b.text || b.reasoning || '';
        if (!text) continue;
        nodes.push(h('details', { class: 'reasoning', 'data-testid': 'reasoning' }, h('summary', null, 'Reasoning'), h('div', { class: 'reasoning-body' }, text)));
      } else if (b.type === 'tool-call') {
        const c = this.card(b.id, b.name);
        c.setArgs(b.arguments);
        nodes.push(c.el);
      } else if (b.type === 'image') {
        const images = gallery(this.id, [b]);
        if (images) nodes.push(h('div', { class: 'msg assistant', 'data-seq': e.seq }, images));
      }
    }
    clear(s.assistant);
    append(s.assistant, nodes);
    s.streams.clear();
    if (d.usage) { this.usage = d.usage; this.updateMeter(); }
  }

  turnEnd(e, d) {
    const r = d.reason || {};
    const t = this.turnEl(d.turn);
    let label;
    switch (r.kind) {
      case 'completed': label = 'Done'; break;
      case 'aborted': label = 'Cancelled'; break;
      case 'error': {
        // The record says what happened in a line; the banner above says what to do.
        const message = (r.error && r.error.message) || 'the turn failed';
        const cause = explain(message);
        label = `Error: ${cause ? cause.short : message}`;
        break;
      }
      case 'interrupted': label = 'Interrupted (dsh stopped during this turn)'; break;
      case 'blocked': label = 'Blocked'; break;
      case 'max-tokens': label = 'Stopped: output limit reached'; break;
      default: label = r.kind || 'ended';
    }
    for (const st of this.steps.values()) for (const s of st.streams.values()) if (s.el) s.el.classList.remove('streaming');
    const end = h('div', { class: `turn-end turn-${r.kind || 'ended'}`, 'data-testid': 'turn-end', 'data-reason': r.kind || '', 'data-seq': e.seq }, h('span', null, label));
    const model = this.answeredBy.get(d.turn);
    if (model) end.append(h('span', { class: 'answered-by', 'data-testid': 'answered-by', title: 'The model that answered' }, model));
    this.turnEnds.set(d.turn, e.seq);
    const asked = this.turnUser.get(d.turn);
    if (asked && r.kind !== 'completed') {
      end.append(h('button', { class: 'link', 'data-testid': 'retry-turn', title: 'Send this turn\'s message again', onclick: () => this.resend(asked) }, 'Retry'));
    }
    const changed = this.changedFiles(d.turn);
    if (changed) t.append(changed);
    const trajectory = this.trajectory(d.turn, d.usage);
    if (trajectory) t.append(trajectory);
    end.append(h('button', { class: 'link', 'data-testid': 'fork-turn', title: 'Start a new session with the conversation up to here', onclick: () => this.fork(e.seq) }, 'Fork from here'));
    t.append(end);
    this.currentTurn = null;
    if (!this.target) this.renderOutline();
    if (!this.target) this.loadOptions(); // a turn can change the mode (plan approval, /permission)
  }

  // A failed model request the retry policy tries again: what failed and when the next
  // attempt goes out (the page shows it while it waits, not only the log).
  retryRow(e, d) {
    const f = d.failure || {};
    const of = d.maxRetries ? ` of ${d.maxRetries}` : '';
    const wait = d.delayMs >= 1000 ? `${(d.delayMs / 1000).toFixed(d.delayMs >= 10000 ? 0 : 1)} s` : `${d.delayMs || 0} ms`;
    const row = h('div', { class: 'note note-retry', 'data-testid': 'retry', 'data-retry': d.retryId || '', 'data-seq': e.seq, role: 'status' },
      h('span', null, `The model request failed${f.code ? ` (${f.code})` : ''}: ${f.message || 'no detail'}. `),
      h('span', { class: 'retry-when' }, `Retry ${d.retry || 1}${of} in ${wait}.`));
    const st = this.step(d.turn, d.step);
    st.el.insertBefore(row, st.assistant); // the step's answer replaces st.assistant's content
  }

  // Files the model handed over with `present`: a card per file, downloaded from the page.
  deliverables(e, d) {
    const list = h('div', { class: 'deliverables', 'data-testid': 'deliverables', 'data-seq': e.seq });
    for (const f of d.files || []) {
      const href = `api/deliverable?session=${encodeURIComponent(this.id)}&path=${encodeURIComponent(f.path)}`;
      list.append(h('div', { class: 'deliverable', 'data-testid': 'deliverable', 'data-path': f.path },
        h('div', { class: 'deliverable-name' }, basename(f.path)),
        f.description ? h('div', { class: 'deliverable-desc' }, f.description) : null,
        h('div', { class: 'deliverable-path' }, f.path),
        h('a', { class: 'btn btn-small', href, download: basename(f.path), 'data-testid': 'deliverable-download' }, 'Download')));
    }
    this.container(d.turn).append(list);
  }

  stepTimes(turn) {
    if (!this.steps_.has(turn)) this.steps_.set(turn, []);
    return this.steps_.get(turn);
  }

  noteChanges(turn, meta, card) {
    const diffs = (meta && Array.isArray(meta.diffs)) ? meta.diffs.slice() : [];
    // A file the write tool created carries no diff: all its lines are new.
    const a = card && card.args;
    if (!diffs.length && card && card.name === 'write' && card.el.dataset.state === 'done' && a && typeof a === 'object' && a.file_path) {
      diffs.push({ path: a.file_path, oldText: '', newText: String(a.content || '') });
    }
    if (!diffs.length) return;
    if (!this.changes.has(turn)) this.changes.set(turn, new Map());
    const files = this.changes.get(turn);
    for (const d of diffs) {
      const f = files.get(d.path) || { add: 0, del: 0 };
      for (const [tag] of diffHunk(d.oldText, d.newText)) { if (tag === '+') f.add++; else if (tag === '-') f.del++; }
      files.set(d.path, f);
    }
  }

  // What the turn changed on disk, one line per file (from its tools' diffs).
  changedFiles(turn) {
    const files = this.changes.get(turn);
    if (!files || !files.size) return null;
    const list = h('ul', { class: 'changed-list' });
    for (const [path, f] of files) {
      list.append(h('li', { 'data-testid': 'changed-file', 'data-path': path }, h('span', { class: 'changed-path' }, path), ' ',
        h('span', { class: 'd-add' }, `+${f.add}`), ' ', h('span', { class: 'd-del' }, `−${f.del}`)));
    }
    return h('details', { class: 'turn-extra', 'data-testid': 'changed-files', open: true },
      h('summary', null, `${files.size === 1 ? '1 file' : `${files.size} files`} changed`), list);
  }

  // What the turn changed in its git working tree, whatever changed it (bash included):
  // replaces the list built from the file tools' diffs. A file's diff loads on demand.
  workspaceChanges(e, d) {
    if (!Array.isArray(d.files) || !d.files.length) return;
    const list = h('ul', { class: 'changed-list' });
    for (const f of d.files) {
      const view = h('div', { class: 'changed-diff hidden' });
      const open = h('button', { class: 'link changed-path', 'data-testid': 'changed-file-open', title: 'Show this file\'s changes', onclick: async () => {
        if (!view.classList.contains('hidden')) { view.classList.add('hidden'); return; }
        view.classList.remove('hidden');
        if (view.dataset.loaded) return;
        view.textContent = 'Loading…';
        try {
          const r = await call('session.workspaceDiff', { sessionId: this.id, seq: e.seq, path: f.path });
          clear(view);
          view.append(unifiedDiff(r.diff));
          view.dataset.loaded = '1';
        } catch (err) { view.textContent = err.message; }
      } }, f.display || f.path);
      const counts = f.binary ? [h('span', { class: 'changed-binary' }, 'binary')] : [h('span', { class: 'd-add' }, `+${f.added}`), ' ', h('span', { class: 'd-del' }, `−${f.deleted}`)];
      list.append(h('li', { 'data-testid': 'changed-file', 'data-path': f.path }, open, ' ', ...counts, view));
    }
    const more = d.total > d.files.length ? ` (${d.files.length} shown)` : '';
    const block = h('details', { class: 'turn-extra', 'data-testid': 'changed-files', 'data-source': 'workspace', open: true },
      h('summary', null, `${d.total === 1 ? '1 file' : `${d.total} files`} changed · +${d.added} −${d.deleted}${more}`), list);
    const t = this.turnEl(d.turn);
    const old = t.querySelector('[data-testid=changed-files]');
    if (old) old.replaceWith(block);
    else {
      const trajectory = t.querySelector('[data-testid=trajectory]');
      if (trajectory) trajectory.before(block); else t.append(block);
    }
  }

  // Per-step duration and tokens of a turn.
  trajectory(turn) {
    const steps = this.steps_.get(turn) || [];
    if (!steps.length) return null;
    const rows = steps.map((st) => {
      const ms = st.end && st.start ? st.end - st.start : null;
      const u = st.usage || {};
      const tokens = st.usage ? `${fmtTokens((u.inputTokens || 0) + (u.cacheReadTokens || 0) + (u.cacheWriteTokens || 0))} in · ${fmtTokens(u.outputTokens || 0)} out` : '';
      return h('tr', { 'data-testid': 'trajectory-step' },
        h('td', null, `step ${st.step}`),
        h('td', null, ms === null ? '–' : ms >= 1000 ? `${(ms / 1000).toFixed(1)} s` : `${ms} ms`),
        h('td', null, tokens));
    });
    const total = steps.reduce((a, st) => a + (st.end && st.start ? st.end - st.start : 0), 0);
    return h('details', { class: 'turn-extra', 'data-testid': 'trajectory' },
      h('summary', null, `${steps.length === 1 ? '1 step' : `${steps.length} steps`} · ${total >= 1000 ? `${(total / 1000).toFixed(1)} s` : `${total} ms`}`),
      h('table', { class: 'trajectory' }, h('tbody', null, rows)));
  }

  compactionRow(e, d) {
    const id = d.compactionId || '';
    let row = this.compactions.get(id);
    if (!row) {
      row = h('div', { class: 'note note-compaction', 'data-testid': 'compaction', 'data-seq': e.seq, role: 'status' }, 'Compacting the conversation…');
      this.compactions.set(id, row);
      this.container(d.turn === null ? undefined : d.turn).append(row);
    }
    if (e.type === 'compaction/summary') {
      row.dataset.shadowed = String(d.shadowedTokenCount || 0);
    } else if (e.type === 'compaction/end') {
      row.dataset.state = d.error ? 'failed' : 'done';
      row.textContent = d.error
        ? `Compaction failed: ${d.error}`
        : `Earlier conversation summarized${row.dataset.shadowed ? ` (about ${fmtTokens(Number(row.dataset.shadowed))} tokens replaced by a summary)` : ''}.`;
    }
  }

  async resend(text) {
    if (this.running) { toast('A turn is running; wait for it or stop it first.', 'info'); return; }
    try {
      await call('session.prompt', { sessionId: this.id, mode: 'queue', content: [{ type: 'text', text }] });
      this.scrollToEnd(true);
    } catch (err) { toast(err.message); }
  }

  // Edit and resend: a new session holding the conversation before that message (this one
  // stays as it is), with the message back in its composer.
  async editAndResend(turn, text) {
    let prev = null;
    for (const [t, seq] of this.turnEnds) if (t < turn && (prev === null || t > prev.t)) prev = { t, seq };
    try {
      let sessionId;
      if (prev) {
        sessionId = (await call('session.fork', { sessionId: this.id, atSeq: prev.seq })).sessionId;
      } else {
        const row = sessionRow(this.id);
        sessionId = (await call('session.create', row && row.workspaceId ? { workspaceId: row.workspaceId } : { cwd: row && row.cwd })).sessionId;
      }
      drafts.set(sessionId, text);
      location.hash = `#/s/${encodeURIComponent(sessionId)}`;
      refreshSoon();
    } catch (err) { toast(err.message); }
  }

  commandEvent(e, d) {
    if (e.type !== 'command/done') return;
    if (!this.target) this.loadOptions();
    const text = d.text || (d.result && d.result.text) || '';
    if (text) this.container(undefined).append(h('div', { class: d.kind === 'error' ? 'note note-error' : 'note', 'data-testid': 'command-reply', 'data-seq': e.seq }, text));
  }

  // ---- live state ---------------------------------------------------------------------

  setRunning(running) {
    this.running = !!running;
    this.el.classList.toggle('is-running', this.running);
    this.stopBtn.classList.toggle('hidden', !this.running);
    this.queueBtn.classList.toggle('hidden', !this.running);
    this.sendBtn.textContent = this.running ? 'Steer' : 'Send';
    this.refreshComposer();
  }

  setQueue(items) {
    clear(this.queueEl);
    for (const it of items) {
      this.queueEl.append(h('div', { class: `queued queued-${it.placement}`, 'data-testid': 'queued', 'data-placement': it.placement },
        h('span', { class: 'queued-label' }, it.placement === 'steering' ? 'Steering' : 'Queued'),
        h('span', { class: 'queued-text' }, it.images ? `${it.text ? `${it.text} ` : ''}[${it.images === 1 ? '1 image' : `${it.images} images`}]` : it.text),
        h('button', { class: 'link', title: 'Remove', onclick: () => call('session.updateQueue', { sessionId: this.id, itemId: it.id, action: { kind: 'remove' } }).catch((err) => toast(err.message)) }, 'Remove')));
    }
  }

  setApprovals(items) {
    clear(this.approvalsEl);
    for (const a of items) this.approvalsEl.append(this.approvalCard(a));
    this.waiting.approvals = items.length;
    this.badge();
  }

  // The tab's title counts what waits for the user (approvals and questions), so a
  // background tab shows it; the composer's live region announces it once.
  badge() {
    const n = this.waiting.approvals + this.waiting.questions;
    const what = this.waiting.approvals ? 'approval' : 'question';
    document.title = n ? `(${n}) ${what} waiting · dsh` : 'dsh';
    if (n > this.waiting.announced) this.announce(`${n === 1 ? `An ${what}` : `${n} requests`} waiting for your answer.`);
    this.waiting.announced = n;
  }

  announce(text) {
    this.liveRegion.textContent = '';
    requestAnimationFrame(() => { this.liveRegion.textContent = text; });
  }

  approvalCard(a) {
    const args = (a.arguments && typeof a.arguments === 'object') ? a.arguments : {};
    const detail = args.command || args.file_path || args.path || args.text || (args.id ? `forget ${args.id}` : '');
    const why = args.justification || a.reason || '';
    const answer = async (outcome, btns) => {
      btns.forEach((b) => { b.disabled = true; });
      try {
        const r = await respond(this.id, a.approvalId, outcome);
        if (!r.accepted) toast('This approval was already answered.', 'info');
      } catch (e) { toast(e.message); btns.forEach((b) => { b.disabled = false; }); }
    };
    const approve = h('button', { class: 'btn btn-primary', 'data-testid': 'approve' }, 'Approve once');
    const reject = h('button', { class: 'btn btn-danger', 'data-testid': 'reject' }, 'Reject');
    approve.addEventListener('click', () => answer('allowed-once', [approve, reject]));
    reject.addEventListener('click', () => answer('rejected', [approve, reject]));
    const card = h('div', { class: 'approval', 'data-testid': 'approval', 'data-approval': a.approvalId, tabindex: 0, role: 'group', 'aria-label': 'Approval needed' },
      h('div', { class: 'approval-title' }, `Approval needed: ${a.toolName}`),
      detail ? h('pre', { class: 'approval-detail', 'data-testid': 'approval-command' }, detail) : null,
      why ? h('div', { class: 'approval-why', 'data-testid': 'approval-why' }, why) : null,
      args.sandbox_permissions ? h('div', { class: 'approval-mode' }, `Requested: ${args.sandbox_permissions}`) : null,
      h('div', { class: 'approval-actions' }, approve, reject));
    // Keyboard: Tab moves between the buttons and Enter or Space presses the focused one
    // (the browser's own behaviour, never remapped: Enter on Reject rejects). Escape anywhere
    // in the card rejects, the safe answer.
    card.addEventListener('keydown', (e) => {
      if (e.key === 'Escape') { e.preventDefault(); reject.click(); }
    });
    return card;
  }

  // Pending questions: a card keeps its half-filled choices while it stays pending.
  setQuestions(items) {
    const keep = new Map();
    for (const q of items) keep.set(q.questionId, this.questionCards.get(q.questionId) || this.questionCard(q));
    this.questionCards = keep;
    clear(this.questionsEl);
    for (const card of keep.values()) this.questionsEl.append(card);
    this.waiting.questions = keep.size;
    this.badge();
  }

  questionCard(q) {
    const controls = [];
    const disable = (on) => controls.forEach((c) => { c.disabled = on; });
    const send = async (reply) => {
      disable(true);
      try {
        const r = await respondQuestion(this.id, q.questionId, reply);
        if (r.accepted) return;
        if (r.reason === 'invalid-answer') { toast(r.message); disable(false); } else toast('This question was already answered.', 'info');
      } catch (e) { toast(e.message); disable(false); }
    };
    const dismiss = h('button', { class: 'btn', 'data-testid': 'question-dismiss', title: 'Close this question and reply in the message box instead' }, 'Reply in chat instead');
    dismiss.addEventListener('click', () => send({ dismissed: true }));
    controls.push(dismiss);
    const card = h('div', { class: 'approval question', 'data-testid': 'question', 'data-question': q.questionId, tabindex: 0, role: 'group', 'aria-label': 'Question for you' });
    if (q.planReview) {
      const feedback = h('textarea', { class: 'question-text', rows: 2, placeholder: 'What should change? (sent with Keep planning)', 'data-testid': 'plan-feedback', 'aria-label': 'Feedback on the plan' });
      const approve = h('button', { class: 'btn btn-primary', 'data-testid': 'plan-approve' }, 'Approve plan');
      const keep = h('button', { class: 'btn', 'data-testid': 'plan-keep' }, 'Keep planning');
      const id = q.questions[0].id;
      approve.addEventListener('click', () => send({ answers: [{ id, selected: [q.planReview.approve] }] }));
      keep.addEventListener('click', () => send({ answers: [{ id, selected: [q.planReview.keepPlanning], custom: feedback.value }] }));
      controls.push(feedback, approve, keep);
      append(card, [
        h('div', { class: 'approval-title' }, 'Plan ready for review'),
        h('div', { class: 'question-plan', 'data-testid': 'plan-review' }, renderMarkdown(q.planReview.plan)),
        feedback,
        h('div', { class: 'approval-actions' }, approve, keep, dismiss),
      ]);
      return card;
    }
    const readers = [];
    for (const item of q.questions || []) {
      const options = item.options || [];
      const multi = item.multiSelect === true;
      const group = `q-${q.questionId}-${item.id}`;
      const boxes = options.map((o) => {
        const input = h('input', { type: multi ? 'checkbox' : 'radio', name: group, value: o.label, 'data-testid': 'question-option' });
        controls.push(input);
        return { input, el: h('label', { class: 'question-option' }, input, h('span', { class: 'question-label' }, o.label), o.description ? h('span', { class: 'question-desc' }, o.description) : null) };
      });
      const text = h('input', { type: 'text', class: 'question-text', placeholder: options.length ? 'Or write your own answer' : 'Your answer', 'data-testid': 'question-custom', 'aria-label': item.question });
      controls.push(text);
      readers.push(() => ({ id: item.id, selected: boxes.filter((b) => b.input.checked).map((b) => b.input.value), custom: text.value }));
      append(card, [
        item.header ? h('div', { class: 'question-header' }, item.header) : null,
        h('div', { class: 'approval-title' }, item.question),
        item.detail ? renderMarkdown(item.detail) : null,
        boxes.length ? h('div', { class: 'question-options' }, ...boxes.map((b) => b.el)) : null,
        text,
      ]);
    }
    const submit = h('button', { class: 'btn btn-primary', 'data-testid': 'question-submit' }, 'Send answer');
    submit.addEventListener('click', () => send({ answers: readers.map((r) => r()) }));
    controls.push(submit);
    card.append(h('div', { class: 'approval-actions' }, submit, dismiss));
    // Enter in the answer field or on an option sends the answer; on a button it presses
    // that button (Enter on "Reply in chat instead" dismisses, it never sends an option).
    card.addEventListener('keydown', (e) => {
      if (e.key === 'Enter' && !e.isComposing && e.target.tagName === 'INPUT') { e.preventDefault(); submit.click(); }
    });
    return card;
  }

  showError(message) {
    const cause = explain(message);
    clear(this.banner);
    if (cause) {
      append(this.banner, [
        h('div', { 'data-testid': 'error-advice' }, cause.advice, ' ',
          h('a', { href: '#/settings', 'data-testid': 'error-settings' }, 'Open Settings → Models')),
        h('details', { class: 'banner-detail' }, h('summary', null, 'Details'), h('div', null, message)),
      ]);
    } else {
      this.banner.textContent = message;
    }
    this.banner.classList.remove('hidden');
  }

  hideError() {
    this.banner.classList.add('hidden');
    this.banner.textContent = '';
  }

  refreshComposer() {
    const row = sessionRow(this.id);
    let reason = '';
    const ws = row && state.workspaces.find((w) => w.workspaceId === row.workspaceId);
    if (state.stopped) reason = 'dsh web is not running.';
    else if (this.unavailable) reason = this.unavailable;
    else if (ws && ws.status === 'missing-dir') reason = `Directory ${ws.path} no longer exists; this session cannot run commands there.`;
    this.input.disabled = !!reason;
    this.sendBtn.disabled = !!reason;
    this.composerNote.textContent = reason || (this.readOnly ? 'Sending a message reopens this session here.' : '');
    const archived = !!(row && row.archived) || state.archivedIds.includes(this.id);
    this.archiveBtn.classList.toggle('hidden', archived);
    this.restoreBtn.classList.toggle('hidden', !archived);
  }

  header() {
    const row = sessionRow(this.id);
    if (row && row.title) this.titleEl.textContent = row.title;
    const cwd = row && row.cwd;
    this.cwdEl.textContent = cwd ? `${basename(cwd)} — ${cwd}` : '';
    this.refreshComposer();
  }

  updateMeter() {
    const u = this.usage || {};
    const used = (u.inputTokens || 0) + (u.cacheReadTokens || 0) + (u.cacheWriteTokens || 0);
    const max = this.contextWindow;
    this.meterText.textContent = this.usage ? `${fmtTokens(used)} / ${max ? fmtTokens(max) : '?'}` : '–';
    this.meterBar.style.width = max ? `${Math.min(100, (100 * used) / max).toFixed(1)}%` : '0%';
    this.meter.title = this.usage ? `input ${u.inputTokens || 0}, output ${u.outputTokens || 0}, cache read ${u.cacheReadTokens || 0} tokens` : 'Context window use';
  }

  railVisibility() {
    this.plan.classList.toggle('hidden', [this.planSection, this.remindSection, this.outlineSection].every((x) => x.classList.contains('hidden')));
  }

  // The session's pending reminders (set by the model with schedule_create), soonest first;
  // each can be deleted. Reloaded when the session opens and after reminder tools and
  // deliveries.
  reloadRemindersSoon() {
    clearTimeout(this.remindTimer);
    this.remindTimer = setTimeout(() => this.loadReminders(), 150);
  }

  async loadReminders() {
    let tasks = [];
    try { tasks = (await call('schedule.list', { sessionId: this.id })).tasks || []; } catch (e) { tasks = []; }
    clear(this.remindList);
    this.remindSection.classList.toggle('hidden', !tasks.length);
    for (const t of tasks) {
      const when = new Date(t.scheduledAt);
      const del = h('button', { class: 'link remind-delete', 'data-testid': 'reminder-delete', 'aria-label': `Delete reminder ${t.title}`, title: 'Delete this reminder', onclick: async () => {
        try { await call('schedule.delete', { id: t.id }); } catch (e) { toast(e.message); }
        this.loadReminders();
      } }, '✕');
      this.remindList.append(h('li', { 'data-testid': 'reminder', 'data-id': t.id, title: t.prompt },
        h('div', { class: 'remind-title' }, t.title, ' ', del),
        h('div', { class: 'remind-when' }, `${ruleText(t)} · next ${when.toLocaleString()}`)));
    }
    this.railVisibility();
  }

  renderPlan() {
    clear(this.planList);
    const todos = this.todos || [];
    this.planSection.classList.toggle('hidden', !todos.length);
    this.railVisibility();
    for (const t of todos) {
      const mark = t.status === 'completed' ? '☑' : t.status === 'in_progress' ? '◐' : '☐';
      this.planList.append(h('li', { 'data-status': t.status, 'data-testid': 'plan-item' }, h('span', { class: 'plan-mark' }, mark), ' ', t.content));
    }
  }

  // The turn outline: one entry per turn (its message, how it ended); a click brings the
  // turn into view. Shown from the second turn on.
  renderOutline() {
    clear(this.outlineList);
    const turns = [...this.turns.keys()].filter((t) => this.turnUser.has(t)).sort((a, b) => a - b);
    this.outlineSection.classList.toggle('hidden', turns.length < 2);
    for (const t of turns) {
      const text = this.turnUser.get(t).split('\n')[0];
      const end = this.turns.get(t).querySelector('[data-testid=turn-end]');
      const state = end ? end.dataset.reason || 'ended' : 'running';
      const item = h('button', { class: 'link outline-item', 'data-testid': 'outline-item', 'data-turn': t, 'data-state': state, title: text, onclick: () => {
        this.stick = false;
        this.turns.get(t).scrollIntoView({ block: 'start' });
      } }, text.length > 60 ? `${text.slice(0, 60)}…` : text);
      this.outlineList.append(h('li', null, item));
    }
    this.railVisibility();
  }

  isAtEnd() {
    const b = this.body;
    return b.scrollHeight - b.scrollTop - b.clientHeight < 80;
  }

  // The view follows the end of the conversation (new events, streamed text, live tool
  // output, cards that appear below and shrink it) until the reader scrolls up; scrolling
  // back to the end, or sending, makes it follow again.
  followEnd() {
    this.stick = true;
    this.autoTop = 0;
    this.body.addEventListener('scroll', () => {
      if (this.body.scrollTop < this.autoTop - 4) this.stick = this.isAtEnd();
      else if (this.isAtEnd()) this.stick = true;
    }, { passive: true });
    const follow = () => {
      if (!this.stick || this.followPending) return;
      this.followPending = true;
      requestAnimationFrame(() => { this.followPending = false; if (this.stick) this.pin(); });
    };
    new MutationObserver(follow).observe(this.body, { childList: true, subtree: true, characterData: true });
    if (typeof ResizeObserver === 'function') new ResizeObserver(follow).observe(this.body);
  }

  pin() {
    this.body.scrollTop = this.body.scrollHeight;
    this.autoTop = this.body.scrollTop;
  }

  scrollToEnd(force) {
    if (force) this.stick = true;
    if (this.stick) this.pin();
  }

  // ---- actions ------------------------------------------------------------------------

  async send(forced) {
    const text = this.input.value;
    const images = this.drafts.items.slice();
    if ((!text.trim() && !images.length) || this.input.disabled) return;
    const mode = forced || (this.running ? 'steer' : 'queue');
    this.slash.close();
    this.mention.close();
    this.sendBtn.disabled = true;
    let sent = false;
    try {
      const content = await promptContent(text, images);
      // The draft leaves the composer while the request is in flight; a failure puts it
      // back in front of whatever was typed or added meanwhile.
      this.input.value = '';
      this.drafts.take(images);
      this.scrollToEnd(true);
      const r = await call('session.prompt', { sessionId: this.id, mode, content });
      sent = true;
      this.drafts.release(images);
      // A recorded command's reply arrives as its command/done event; only replies that
      // are not in the log (help, an unknown name) are shown from here.
      if (r.command && !r.command.recorded) this.commandReply(r.command);
    } catch (e) {
      toast(e.message);
    } finally {
      if (!sent) {
        const typed = this.input.value;
        this.input.value = typed && typed !== text ? `${text}${text && !text.endsWith('\n') ? '\n' : ''}${typed}` : text;
        this.drafts.restore(images);
      }
      this.refreshComposer();
    }
  }

  // ---- model, effort and permission mode ------------------------------------------------

  async loadOptions() {
    try { this.showOptions(await call('session.options', { sessionId: this.id })); } catch (e) { /* the header keeps what it showed */ }
  }

  async choose(method, params) {
    try {
      this.showOptions(await call(method, { sessionId: this.id, ...params }));
    } catch (e) {
      toast(e.message);
      this.loadOptions();
    }
  }

  showOptions(o) {
    this.options = o;
    clear(this.modelSel);
    const groups = new Map();
    for (const m of o.models || []) {
      if (!groups.has(m.provider)) groups.set(m.provider, h('optgroup', { label: m.providerName || m.provider }));
      groups.get(m.provider).append(h('option', { value: JSON.stringify([m.provider, m.model]) }, m.model));
    }
    for (const g of groups.values()) this.modelSel.append(g);
    this.modelSel.value = JSON.stringify([o.model.provider, o.model.model]);
    clear(this.effortSel);
    this.effortSel.classList.toggle('hidden', !o.effort);
    if (o.effort) {
      for (const e of o.effort.options) this.effortSel.append(h('option', { value: e }, `effort: ${e}`));
      this.effortSel.value = o.effort.current || '';
    }
    const ap = o.agentPreset;
    clear(this.presetSel);
    this.presetSel.classList.toggle('hidden', !ap || !(ap.presets || []).length);
    if (ap) {
      for (const p of ap.presets || []) this.presetSel.append(h('option', { value: p.id, title: p.description || '' }, `agent: ${p.name || p.id}`));
      this.presetSel.value = ap.current || '';
      this.presetSel.disabled = !!ap.locked;
      this.presetSel.title = ap.locked ? 'The agent preset is fixed once the session has started' : 'Agent preset: which tools the model is offered (choose before the first message)';
      this.el.dataset.preset = ap.current || '';
    }
    clear(this.modeSel);
    this.modeSel.classList.toggle('hidden', !o.mode);
    if (o.mode) {
      for (const m of o.mode.options) this.modeSel.append(h('option', { value: m.id, title: m.description || '' }, m.id));
      this.modeSel.value = o.mode.current || '';
      this.el.dataset.mode = o.mode.current || '';
    }
  }

  // The session's slash commands, fetched once per view.
  async commandList() {
    if (!this.commands) {
      try { this.commands = (await call('session.commands', { sessionId: this.id })).items || []; } catch (e) { this.commands = []; }
    }
    return this.commands;
  }

  commandReply(command) {
    this.body.append(h('div', { class: command.isError ? 'note note-error' : 'note', 'data-testid': 'command-reply', role: 'status' }, command.text));
    this.scrollToEnd(true);
  }

  async stop() {
    try { await call('session.cancel', { sessionId: this.id }); } catch (e) { toast(e.message); }
  }

  async rename() {
    const title = await promptDialog('Rename session', 'Title', this.titleEl.textContent, 'Rename', { testid: 'rename-dialog' });
    if (title === undefined) return;
    try {
      const r = await call('session.rename', { sessionId: this.id, title });
      this.titleEl.textContent = r.title;
      refreshSoon();
    } catch (e) { toast(e.message); }
  }

  async fork(atSeq) {
    try {
      const payload = { sessionId: this.id };
      if (atSeq !== null && atSeq !== undefined) payload.atSeq = atSeq;
      const r = await call('session.fork', payload);
      toast('Forked into a new session.', 'info');
      location.hash = `#/s/${encodeURIComponent(r.sessionId)}`;
    } catch (e) { toast(e.message); }
  }

  async exportDialog() {
    const format = await dialog('Export this session', (close) => h('div', null,
      h('p', null, 'A transcript to read or share, or the full event log (one JSON object per line) for tools.'),
      h('div', { class: 'dialog-actions' },
        h('button', { class: 'btn', onclick: () => close(undefined), 'data-testid': 'dialog-cancel' }, 'Cancel'),
        h('button', { class: 'btn', onclick: () => close('jsonl'), 'data-testid': 'export-jsonl' }, 'Event log (JSONL)'),
        h('button', { class: 'btn btn-primary', onclick: () => close('markdown'), 'data-testid': 'export-markdown', autofocus: true }, 'Transcript (Markdown)'))), { testid: 'export-dialog' });
    if (!format) return;
    try {
      const r = await call('session.export', { sessionId: this.id, format });
      const url = URL.createObjectURL(new Blob([r.text], { type: r.mime }));
      const a = h('a', { href: url, download: r.filename, class: 'hidden', 'data-testid': 'export-link' });
      document.body.append(a);
      a.click();
      setTimeout(() => { URL.revokeObjectURL(url); a.remove(); }, 1000);
    } catch (e) { toast(e.message); }
  }

  async archive(on) {
    try {
      const r = await call(on ? 'workspace.archiveSession' : 'workspace.unarchiveSession', { sessionId: this.id, stopActivity: on });
      state.archivedIds = r.archivedSessionIds || [];
      this.refreshComposer();
      refreshSoon();
      toast(on ? 'Session archived.' : 'Session restored.', 'info');
    } catch (e) { toast(e.message); }
  }

  async remove() {
    const ok = await confirmDialog('Delete session',
      `Delete “${this.titleEl.textContent}”? This deletes its log from disk and cannot be undone.`, 'Delete', { danger: true, testid: 'delete-dialog' });
    if (!ok) return;
    try {
      await call('session.delete', { sessionId: this.id, stopActivity: true });
      toast('Session deleted.', 'info');
      refreshSoon();
      if (this.onClose) this.onClose();
    } catch (e) { toast(e.message); }
  }
}

export { codeBlock };

// Errors a user can fix themselves, in their words: what happened (for the turn's record)
// and what to do (for the banner). Anything else is shown as the provider or dsh said it.
function explain(message) {
  const m = String(message || '');
  const missing = /has no API key because (\w+) is not set|MISSING_CREDENTIAL/.exec(m);
  if (missing) {
    const env = missing[1] || 'the provider\'s key variable';
    return {
      short: 'no API key is set for the model provider',
      advice: `dsh needs an API key for the model provider before it can answer. Save it in Settings → Models (or start dsh web with ${env} set), then send your message again.`,
    };
  }
  if (/\b401\b|unauthori[sz]ed|invalid api key|authentication fail|INVALID_CREDENTIAL/i.test(m)) {
    return {
      short: 'the model provider refused the API key',
      advice: 'The model provider refused the API key. Check or replace it in Settings → Models, then send again.',
    };
  }
  if (/connection refused|unreachable|timed out|dns error|could not connect|failed to connect|TRANSPORT/i.test(m)) {
    return {
      short: 'the model endpoint could not be reached',
      advice: 'The model endpoint could not be reached (is the server up, the network available, the base URL right?). Check Settings → Models, then send again.',
    };
  }
  return null;
}

// Completion menus of the composer: `/` lists the session's commands while the composer
// holds `/name` (no space yet); `@` lists workspace files matching what follows it. ↑/↓
// choose, Tab or Enter completes, Escape closes; a click completes too.
class Completer {
  // find(text, caret) → {start, query} or null; load(query) → [{label, detail, insert}];
  // exact(query, items) → whether Enter should send rather than complete.
  constructor(input, { testid, item, label, find, load, exact }) {
    this.input = input;
    this.itemTestid = item;
    this.find = find;
    this.load = load;
    this.exact = exact || (() => false);
    this.items = [];
    this.index = 0;
    this.at = null;
    this.seq = 0;
    this.el = h('div', { class: 'slash-menu hidden', role: 'listbox', 'data-testid': testid, 'aria-label': label });
    input.addEventListener('input', () => this.update());
    input.addEventListener('blur', () => setTimeout(() => this.close(), 150));
  }

  async update() {
    const at = this.find(this.input.value, this.input.selectionStart);
    if (!at) { this.close(); return; }
    const seq = ++this.seq;
    const items = await this.load(at.query);
    if (seq !== this.seq) return; // typed on meanwhile
    this.at = at;
    this.items = items.slice(0, 12);
    this.index = 0;
    this.render();
  }

  render() {
    clear(this.el);
    this.el.classList.toggle('hidden', !this.items.length);
    this.items.forEach((c, i) => {
      const item = h('div', { class: i === this.index ? 'slash-item active' : 'slash-item', role: 'option', 'aria-selected': String(i === this.index), 'data-testid': this.itemTestid, 'data-name': c.value },
        h('span', { class: 'slash-name' }, c.label), c.hint ? h('span', { class: 'slash-hint' }, ` ${c.hint}`) : null,
        c.detail ? h('span', { class: 'slash-desc' }, c.detail) : null);
      item.addEventListener('mousedown', (e) => { e.preventDefault(); this.index = i; this.complete(); });
      this.el.append(item);
    });
  }

  open() { return !this.el.classList.contains('hidden') && this.items.length > 0; }

  close() { this.seq++; this.items = []; this.el.classList.add('hidden'); clear(this.el); }

  complete() {
    const c = this.items[this.index];
    if (!c || !this.at) return;
    const v = this.input.value;
    const end = this.at.start + this.at.query.length + 1;
    this.input.value = v.slice(0, this.at.start) + c.insert + v.slice(end);
    const caret = this.at.start + c.insert.length;
    this.close();
    this.input.focus();
    this.input.setSelectionRange(caret, caret);
  }

  // Handles a key of the composer; true when the menu used it.
  key(e) {
    if (!this.open() || e.isComposing) return false;
    if (e.key === 'ArrowDown' || e.key === 'ArrowUp') {
      e.preventDefault();
      const n = this.items.length;
      this.index = (this.index + (e.key === 'ArrowDown' ? 1 : n - 1)) % n;
      this.render();
      return true;
    }
    if (e.key === 'Escape') { e.preventDefault(); this.close(); return true; }
    if (e.key === 'Tab' || (e.key === 'Enter' && !e.shiftKey)) {
      if (e.key === 'Enter' && this.at && this.exact(this.at.query, this.items)) { this.close(); return false; }
      e.preventDefault();
      this.complete();
      return true;
    }
    return false;
  }
}

function slashMenu(input, commands) {
  return new Completer(input, {
    testid: 'slash-menu',
    item: 'slash-item',
    label: 'Commands',
    find: (text) => { const m = /^\/([\w:.-]*)$/.exec(text); return m ? { start: 0, query: m[1] } : null; },
    load: async (query) => {
      const q = query.toLowerCase();
      const all = await commands();
      const starts = all.filter((c) => c.name.toLowerCase().startsWith(q));
      const contains = all.filter((c) => !c.name.toLowerCase().startsWith(q) && c.name.toLowerCase().includes(q));
      return [...starts, ...contains].map((c) => ({ value: c.name, label: `/${c.name}`, hint: c.hint, detail: c.description, insert: `/${c.name} ` }));
    },
    // Enter on a name typed in full sends it.
    exact: (query, items) => items.some((c) => c.value === query),
  });
}

function fileMenu(input, sessionId) {
  return new Completer(input, {
    testid: 'file-menu',
    item: 'file-item',
    label: 'Files',
    find: (text, caret) => {
      const m = /(^|\s)@([^\s@]*)$/.exec(text.slice(0, caret));
      return m ? { start: caret - m[2].length - 1, query: m[2] } : null;
    },
    load: async (query) => {
      try {
        const r = await call('session.files', { sessionId, query });
        // MCP resources first (their text is attached when the message is sent), then files.
        const resources = (r.resources || []).map((x) => ({ value: x.ref, label: `@${x.ref}`, hint: x.name, detail: `resource of ${x.server}`, insert: `@${x.ref} ` }));
        return [...resources, ...(r.items || []).map((p) => ({ value: p, label: `@${p}`, insert: `@${p} ` }))];
      } catch (e) { return []; }
    },
  });
}
