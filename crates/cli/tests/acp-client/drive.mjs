// Drives `dsh acp` through the official ACP TypeScript SDK's client app and validates every
// frame the agent sends against the SDK's own zod schemas (the client app validates
// notifications and agent requests itself, but not responses to its requests; this does).
//
//   node drive.mjs <dsh binary> <script.json>
//
// The script is {"steps": [...], "permissions": ["allow_once", ...], "fs": bool}; steps are
// {"do": "initialize"|"new"|"prompt"|"load"|"resume"|"set_mode"|"set_config_option"|"list"|
// "close", ...}.
// Prints one JSON object: {results, updates, agentRequests, schemaErrors, files}.
import { spawn } from 'node:child_process';
import { readFileSync, writeFileSync } from 'node:fs';
import { Readable, Writable, Transform } from 'node:stream';
import * as acp from '@agentclientprotocol/sdk';

const z = await import(new URL('../schema/zod.gen.js', import.meta.resolve('@agentclientprotocol/sdk')).href);

const [bin, scriptPath] = process.argv.slice(2);
const script = JSON.parse(readFileSync(scriptPath, 'utf8'));
const cwd = process.env.WORKDIR ?? process.cwd();
const child = spawn(bin, ['acp'], { stdio: ['pipe', 'pipe', 'inherit'], env: process.env, cwd });

const sent = new Map();
const schemaErrors = [];
const responseSchema = {
  initialize: z.zInitializeResponse, 'session/new': z.zNewSessionResponse,
  'session/load': z.zLoadSessionResponse, 'session/resume': z.zResumeSessionResponse,
  'session/prompt': z.zPromptResponse, 'session/set_mode': z.zSetSessionModeResponse,
  'session/list': z.zListSessionsResponse, 'session/close': z.zCloseSessionResponse,
  'session/set_config_option': z.zSetSessionConfigOptionResponse,
};
const requestSchema = {
  'session/request_permission': z.zRequestPermissionRequest,
  'fs/read_text_file': z.zReadTextFileRequest, 'fs/write_text_file': z.zWriteTextFileRequest,
  'terminal/create': z.zCreateTerminalRequest, 'terminal/output': z.zTerminalOutputRequest,
  'terminal/wait_for_exit': z.zWaitForTerminalExitRequest, 'terminal/kill': z.zKillTerminalRequest,
  'terminal/release': z.zReleaseTerminalRequest,
};
function check(frame) {
  let schema; let what;
  if ('method' in frame && 'id' in frame) { what = frame.method; schema = requestSchema[what]; }
  else if ('method' in frame) { what = frame.method; schema = what === 'session/update' ? z.zSessionNotification : undefined; }
  else {
    what = `response to ${sent.get(JSON.stringify(frame.id))}`;
    if ('error' in frame) return;
    schema = responseSchema[sent.get(JSON.stringify(frame.id))];
  }
  if (!schema) { schemaErrors.push(`no schema for ${what}`); return; }
  const r = schema.safeParse(frame.params ?? frame.result);
  if (!r.success) schemaErrors.push(`${what}: ${JSON.stringify(r.error.issues).slice(0, 600)}`);
}
function lines(onLine) {
  let buf = '';
  return new Transform({
    transform(chunk, _enc, cb) {
      buf += chunk;
      let i;
      while ((i = buf.indexOf('\n')) >= 0) {
        const line = buf.slice(0, i);
        buf = buf.slice(i + 1);
        if (line.trim()) onLine(line);
      }
      cb(null, chunk);
    },
  });
}
const tapIn = lines((line) => {
  try { check(JSON.parse(line)); } catch { schemaErrors.push(`not JSON on stdout: ${line.slice(0, 200)}`); }
});
const tapOut = lines((line) => {
  const f = JSON.parse(line);
  if ('method' in f && 'id' in f) sent.set(JSON.stringify(f.id), f.method);
});
tapOut.pipe(child.stdin);
const stream = acp.ndJsonStream(Writable.toWeb(tapOut), Readable.toWeb(child.stdout.pipe(tapIn)));

// Every update, agent request and step result gets the next number, so tests can check order.
let counter = 0;
const updates = [];
const agentRequests = [];
const files = {};
const terminals = new Map();
const answers = [...(script.permissions ?? [])];
const app = acp.client({ name: 'dsh-acp-client-tests' })
  .onNotification(acp.methods.client.session.update, ({ params }) => { updates.push({ n: counter++, ...params }); })
  .onRequest(acp.methods.client.session.requestPermission, ({ params }) => {
    agentRequests.push({ n: counter++, method: 'session/request_permission', params });
    const kind = answers.shift() ?? 'reject_once';
    const option = params.options.find((o) => o.kind === kind);
    return { outcome: option ? { outcome: 'selected', optionId: option.optionId } : { outcome: 'cancelled' } };
  })
  .onRequest(acp.methods.client.fs.readTextFile, ({ params }) => {
    agentRequests.push({ n: counter++, method: 'fs/read_text_file', params });
    // An editor returns its buffer: the test's "unsaved" text when it has one.
    const content = files[params.path] ?? script.buffers?.[params.path] ?? readFileSync(params.path, 'utf8');
    return { content };
  })
  .onRequest(acp.methods.client.fs.writeTextFile, ({ params }) => {
    agentRequests.push({ n: counter++, method: 'fs/write_text_file', params });
    files[params.path] = params.content;
    writeFileSync(params.path, params.content);
    return {};
  })
  // Terminals as an editor runs them: a real process per terminal, output kept (combined).
  .onRequest(acp.methods.client.terminal.create, ({ params }) => {
    agentRequests.push({ n: counter++, method: 'terminal/create', params });
    const id = `term-${terminals.size + 1}`;
    const env = Object.fromEntries((params.env ?? []).map((e) => [e.name, e.value]));
    const proc = spawn(params.command, params.args ?? [], { cwd: params.cwd, env: { PATH: process.env.PATH, ...env } });
    const t = { output: '', exit: null, waiters: [] };
    const add = (d) => { t.output += d.toString(); };
    proc.stdout.on('data', add);
    proc.stderr.on('data', add);
    proc.on('close', (code, signal) => { t.exit = { exitCode: code, signal }; for (const w of t.waiters) w(t.exit); });
    t.proc = proc;
    terminals.set(id, t);
    return { terminalId: id };
  })
  .onRequest(acp.methods.client.terminal.waitForExit, ({ params }) => {
    agentRequests.push({ n: counter++, method: 'terminal/wait_for_exit', params });
    const t = terminals.get(params.terminalId);
    return t.exit ? t.exit : new Promise((resolve) => t.waiters.push(resolve));
  })
  .onRequest(acp.methods.client.terminal.output, ({ params }) => {
    agentRequests.push({ n: counter++, method: 'terminal/output', params });
    const t = terminals.get(params.terminalId);
    return { output: t.output, truncated: false, ...(t.exit ? { exitStatus: t.exit } : {}) };
  })
  .onRequest(acp.methods.client.terminal.kill, ({ params }) => {
    agentRequests.push({ n: counter++, method: 'terminal/kill', params });
    terminals.get(params.terminalId).proc.kill('SIGKILL');
    return {};
  })
  .onRequest(acp.methods.client.terminal.release, ({ params }) => {
    agentRequests.push({ n: counter++, method: 'terminal/release', params });
    const t = terminals.get(params.terminalId);
    if (t && !t.exit) t.proc.kill('SIGKILL');
    return {};
  });

const results = [];
let sessionId = script.sessionId;
await app.connectWith(stream, async (agent) => {
  for (const step of script.steps) {
    const call = async (method, params) => {
      try { return { ok: await agent.request(method, params) }; } catch (e) { return { error: { code: e.code, message: e.message, data: e.data } }; }
    };
    let r;
    switch (step.do) {
      case 'initialize':
        r = await call(acp.methods.agent.initialize, {
          protocolVersion: acp.PROTOCOL_VERSION,
          clientCapabilities: { fs: { readTextFile: !!script.fs, writeTextFile: !!script.fs }, terminal: !!script.terminal },
        });
        break;
      case 'new':
        r = await call(acp.methods.agent.session.new, { cwd, mcpServers: [] });
        if (r.ok) sessionId = r.ok.sessionId;
        break;
      case 'prompt':
        r = await call(acp.methods.agent.session.prompt, { sessionId, prompt: [{ type: 'text', text: step.text }] });
        break;
      case 'load':
        r = await call(acp.methods.agent.session.load, { sessionId: step.sessionId ?? sessionId, cwd, mcpServers: [] });
        break;
      case 'resume':
        r = await call(acp.methods.agent.session.resume, { sessionId: step.sessionId ?? sessionId, cwd, mcpServers: [] });
        break;
      case 'set_mode':
        r = await call(acp.methods.agent.session.setMode, { sessionId, modeId: step.modeId });
        break;
      case 'set_config_option':
        r = await call(acp.methods.agent.session.setConfigOption, { sessionId, configId: step.configId, value: step.value });
        break;
      case 'list':
        r = await call(acp.methods.agent.session.list, {});
        break;
      case 'close':
        r = await call(acp.methods.agent.session.close, { sessionId });
        break;
      default:
        r = { error: { message: `unknown step ${step.do}` } };
    }
    results.push({ n: counter++, do: step.do, ...r, sessionId });
  }
});
child.stdin.end();
await new Promise((resolve) => child.on('exit', resolve));
process.stdout.write(JSON.stringify({ results, updates, agentRequests, schemaErrors, files }) + '\n');
