// Validates agent frames against the official ACP SDK's zod schemas
// (@agentclientprotocol/sdk, installed by `npm ci` in crates/cli/tests/acp-client).
//
//   node validate.mjs <frames.json>
//
// frames.json: [{"scenario": NAME, "frames": [{"frame": {...}, "answers": METHOD?}]}], where
// `answers` names the client request a response answers. Prints one JSON object:
// {"checked": N, "errors": ["scenario: what: issue", ...]}.
import { readFileSync } from 'node:fs';
import { createRequire } from 'node:module';
import { fileURLToPath, pathToFileURL } from 'node:url';

const client = new URL('../../crates/cli/tests/acp-client/package.json', import.meta.url);
const entry = createRequire(fileURLToPath(client)).resolve('@agentclientprotocol/sdk');
const z = await import(new URL('../schema/zod.gen.js', pathToFileURL(entry)).href);

const responses = {
  initialize: z.zInitializeResponse,
  authenticate: z.zAuthenticateResponse,
  'session/new': z.zNewSessionResponse,
  'session/load': z.zLoadSessionResponse,
  'session/prompt': z.zPromptResponse,
  'session/set_mode': z.zSetSessionModeResponse,
};
const requests = {
  'session/request_permission': z.zRequestPermissionRequest,
  'fs/read_text_file': z.zReadTextFileRequest,
  'fs/write_text_file': z.zWriteTextFileRequest,
};
const notifications = { 'session/update': z.zSessionNotification };

const input = JSON.parse(readFileSync(process.argv[2], 'utf8'));
const errors = [];
let checked = 0;
for (const { scenario, frames } of input) {
  for (const { frame, answers } of frames) {
    let what;
    let schema;
    let payload;
    if ('method' in frame) {
      what = frame.method;
      schema = ('id' in frame ? requests : notifications)[frame.method];
      payload = frame.params;
    } else if ('error' in frame) {
      // JSON-RPC errors: a numeric code and a message.
      what = `error answering ${answers ?? 'an unknown request'}`;
      checked += 1;
      const e = frame.error;
      if (!(e && Number.isInteger(e.code) && typeof e.message === 'string')) {
        errors.push(`${scenario}: ${what}: not a JSON-RPC error object`);
      }
      continue;
    } else {
      what = `response to ${answers ?? 'an unknown request'}`;
      schema = responses[answers];
      payload = frame.result;
    }
    if (!schema) {
      errors.push(`${scenario}: ${what}: the SDK has no schema for it`);
      continue;
    }
    checked += 1;
    const r = schema.safeParse(payload);
    if (!r.success) errors.push(`${scenario}: ${what}: ${JSON.stringify(r.error.issues).slice(0, 600)}`);
  }
}
process.stdout.write(JSON.stringify({ checked, errors }) + '\n');
