// The wire: JSON RPC over POST /api/<method>, approval and question answers over /api/respond, and the
// server-sent event stream with its cursor. The stream applies `events` frames only when
// they continue the cursor exactly; anything else reopens the stream from the cursor.

export class ApiError extends Error {
  constructor(code, message, details) {
    super(message);
    this.code = code;
    this.details = details || {};
  }
}

let onUnauthorized = () => {};
export function setUnauthorizedHandler(f) { onUnauthorized = f; }

let counter = 0;
async function post(path, body) {
  let resp;
  try {
    resp = await fetch(path, {
      method: 'POST',
      headers: { 'content-type': 'application/json' },
      body: JSON.stringify(body),
      credentials: 'same-origin',
    });
  } catch (e) {
    throw new ApiError('offline', 'dsh web is not reachable (was it stopped?)');
  }
  if (resp.status === 401) {
    onUnauthorized();
    throw new ApiError('unauthorized', 'Sign-in expired: open the URL printed by dsh web.');
  }
  if (!resp.ok) throw new ApiError('http', `${resp.status} ${await resp.text()}`);
  return resp.json();
}

// The browser's IANA time zone; every prompt carries it (the model reads the user's dates
// and times in it).
export function clientTimeZone() {
  try { return Intl.DateTimeFormat().resolvedOptions().timeZone || undefined; } catch (e) { return undefined; }
}

export async function call(method, payload = {}) {
  if (method === 'session.prompt' && payload.clientTimeZone === undefined) {
    const zone = clientTimeZone();
    if (zone) payload = { ...payload, clientTimeZone: zone };
  }
  const rpcId = `r${Date.now().toString(36)}-${++counter}`;
  const answer = await post(`api/${method}`, { type: 'client-request', rpcId, method, payload });
  const result = answer && answer.result;
  if (!result) throw new ApiError('bad-response', 'The server sent an unreadable answer.');
  if (result.ok) return result.value;
  const e = result.error || {};
  throw new ApiError(e.code || 'internal', e.message || 'The request failed.', e.details);
}

// A user question: `{answers: [{id, selected, custom?}]}` or `{dismissed: true}`.
export async function respondQuestion(sessionId, questionId, reply) {
  return post('api/respond', {
    type: 'client-response',
    rpcId: questionId,
    result: { ok: true, value: { sessionId, questionId, ...reply } },
  });
}

export async function respond(sessionId, approvalId, outcome) {
  return post('api/respond', {
    type: 'client-response',
    rpcId: approvalId,
    result: { ok: true, value: { sessionId, approvalId, outcome } },
  });
}

// One event stream (host frames, plus one session's frames when `session` is set).
// handlers: {hello, host, snapshot, events(list), live, status, queue, approvals, questions, output,
// agentError, sessionError, shutdown, gap}
export class Stream {
  constructor(session, handlers) {
    this.session = session;
    this.handlers = handlers;
    this.cursor = null; // `${instance}:${next}` of the last snapshot/events frame
    this.next = null;
    this.es = null;
    this.closed = false;
    this.hiddenTimer = null;
    this.onVisibility = () => this.visibility();
    document.addEventListener('visibilitychange', this.onVisibility);
    this.open();
  }

  url() {
    const q = new URLSearchParams();
    if (this.session) q.set('session', this.session);
    if (this.cursor) q.set('since', this.cursor);
    const s = q.toString();
    return `api/events${s ? `?${s}` : ''}`;
  }

  open() {
    if (this.closed) return;
    const es = new EventSource(this.url());
    this.es = es;
    const on = (name, f) => es.addEventListener(name, (m) => {
      if (this.es !== es) return;
      let data;
      try { data = JSON.parse(m.data); } catch (e) { return; }
      f(data, m);
    });
    const hd = this.handlers;
    on('hello', (d) => hd.hello && hd.hello(d));
    on('host', (d) => hd.host && hd.host(d));
    on('snapshot', (d, m) => {
      this.next = d.next;
      this.cursor = m.lastEventId || null;
      hd.snapshot && hd.snapshot(d);
    });
    on('events', (list, m) => {
      if (!list.length) return;
      if (this.next !== null && list[0].seq !== this.next) {
        // Never apply a batch that does not continue the cursor: reopen from it.
        const fresh = list.filter((e) => e.seq >= this.next);
        if (!fresh.length) { this.cursor = m.lastEventId || this.cursor; return; }
        if (fresh[0].seq !== this.next) { hd.gap && hd.gap(this.next, fresh[0].seq); this.reopen(); return; }
        list = fresh;
      }
      this.next = list[list.length - 1].seq + 1;
      this.cursor = m.lastEventId || `${(this.cursor || ':').split(':')[0]}:${this.next}`;
      hd.events && hd.events(list);
    });
    on('live', (d) => hd.live && hd.live(d));
    on('status', (d) => hd.status && hd.status(d));
    on('queue', (d) => hd.queue && hd.queue(d));
    on('approvals', (d) => hd.approvals && hd.approvals(d));
    on('questions', (d) => hd.questions && hd.questions(d));
    on('output', (d) => hd.output && hd.output(d));
    on('agent-error', (d) => hd.agentError && hd.agentError(d));
    on('session-error', (d) => hd.sessionError && hd.sessionError(d));
    on('shutdown', (d) => { hd.shutdown && hd.shutdown(d); this.close(); });
    es.onerror = () => {
      if (this.es !== es) return;
      if (es.readyState === EventSource.CLOSED) {
        // Refused (401) or a broken response: check once, then retry from the cursor.
        fetch('api/events-probe', { method: 'HEAD' }).then((r) => {
          if (r.status === 401) onUnauthorized();
          else setTimeout(() => this.reopen(), 1000);
        }).catch(() => setTimeout(() => this.reopen(), 2000));
      }
    };
  }

  reopen() {
    if (this.es) this.es.close();
    this.es = null;
    this.open();
  }

  visibility() {
    // A hidden tab gives its connection back after a minute (browsers allow six per host).
    if (document.hidden) {
      this.hiddenTimer = setTimeout(() => { if (this.es) { this.es.close(); this.es = null; } }, 60000);
    } else {
      clearTimeout(this.hiddenTimer);
      if (!this.es && !this.closed) this.open();
    }
  }

  close() {
    this.closed = true;
    clearTimeout(this.hiddenTimer);
    document.removeEventListener('visibilitychange', this.onVisibility);
    if (this.es) this.es.close();
    this.es = null;
  }
}
