// The host half's façade and the engine bridge (see engine.rs). Evaluated once per package
// engine; the host functions come in as arguments and stay in this closure.
(function (hostRegister, hostUnregister, hostLog, hostDone, hostSettle) {
  'use strict';
  const render = (e) => {
    try {
      if (e instanceof Error) {
        const head = String(e.name) + ': ' + String(e.message);
        // Frames from this bridge (named __cordis_*) and below are noise to the package author.
        const lines = typeof e.stack === 'string' ? e.stack.replace(/\s+$/, '').split('\n') : [];
        const cut = lines.findIndex((l) => l.includes('__cordis_'));
        const stack = (cut >= 0 ? lines.slice(0, cut) : lines).join('\n');
        return stack.length > 0 ? head + '\n' + stack : head;
      }
      return String(e);
    } catch (_) { return 'the package threw an unrenderable value'; }
  };
  const show = (v) => {
    if (typeof v === 'string') return v;
    if (v instanceof Error) return render(v);
    if (v === undefined || typeof v === 'function' || typeof v === 'symbol' || typeof v === 'bigint') return String(v);
    try { const s = JSON.stringify(v); return s === undefined ? String(v) : s; } catch (_) { return String(v); }
  };
  const print = (...args) => { hostLog(args.map(show).join(' ')); };
  globalThis.console = Object.freeze({ log: print, info: print, warn: print, error: print, debug: print });
  const tools = new Map();
  const effects = [];
  const NAME = /^[A-Za-z0-9_-]{1,64}$/;
  const register = (definition) => {
    if (definition === null || typeof definition !== 'object') {
      throw new TypeError('ctx.tools.register needs a tool definition: { name, description, parameters, execute }');
    }
    const name = definition.name;
    if (typeof name !== 'string' || !NAME.test(name)) {
      throw new TypeError('a dynamic tool name must be 1-64 letters, digits, "_" or "-"');
    }
    if (typeof definition.execute !== 'function') {
      throw new TypeError('dynamic tool "' + name + '" needs an execute(args) function');
    }
    if (tools.has(name)) throw new Error('this package already registered a tool named "' + name + '"');
    const description = definition.description === undefined ? '' : String(definition.description);
    const parameters = definition.parameters === undefined ? { type: 'object', properties: {} } : definition.parameters;
    // A schema the model provider would reject breaks every later request, so the top level
    // must be an object schema.
    if (parameters === null || typeof parameters !== 'object' || Array.isArray(parameters)
        || (parameters.type !== undefined && parameters.type !== 'object')
        || (parameters.properties !== undefined
            && (parameters.properties === null || typeof parameters.properties !== 'object' || Array.isArray(parameters.properties)))) {
      throw new TypeError('the parameters of dynamic tool "' + name + '" must be an object JSON Schema: { type: "object", properties: { ... } }');
    }
    let schema;
    try { schema = JSON.stringify(parameters); } catch (_) { schema = undefined; }
    if (schema === undefined) throw new TypeError('the parameters of dynamic tool "' + name + '" must be plain JSON');
    hostRegister(name, description, schema);
    const entry = { execute: definition.execute };
    tools.set(name, entry);
    let live = true;
    return () => {
      if (!live) return;
      live = false;
      if (tools.get(name) === entry) { tools.delete(name); hostUnregister(name); }
    };
  };
  const effect = (execute) => {
    if (typeof execute !== 'function') throw new TypeError('ctx.effect needs a function that returns its disposer');
    const dispose = execute();
    const entry = { dispose: typeof dispose === 'function' ? dispose : () => {} };
    effects.push(entry);
    return () => {
      const i = effects.indexOf(entry);
      if (i >= 0) { effects.splice(i, 1); entry.dispose(); }
    };
  };
  const toolsFacade = Object.freeze({ register, list: () => [...tools.keys()] });
  const SERVICES = ['tools'];
  const ctx = Object.freeze({
    tools: toolsFacade,
    effect,
    get: (name) => (name === 'tools' ? toolsFacade : undefined),
  });
  globalThis.harness = Object.freeze({ defineTool: (d) => d, registerTool: (_ctx, d) => register(d) });
  const hidden = (name, value) => Object.defineProperty(globalThis, name, { value, enumerable: false });
  hidden('__cordis_start', (promise) => promise.then(function __cordis_apply(plugin) {
    if (plugin === undefined) {
      throw new Error('the host half returned undefined: end the code with `return { apply(ctx) { ... } }`');
    }
    let apply;
    if (typeof plugin === 'function') apply = plugin;
    else if (plugin !== null && typeof plugin === 'object' && typeof plugin.apply === 'function') apply = plugin.apply.bind(plugin);
    else throw new Error('the host half must return a function or an object with apply(ctx)');
    const inject = plugin.inject;
    const wanted = Array.isArray(inject) ? inject : (inject !== null && typeof inject === 'object') ? Object.keys(inject) : [];
    const missing = wanted.filter((s) => !SERVICES.includes(s));
    if (missing.length > 0) {
      throw new Error('dynamic packages can inject only ' + SERVICES.join(', ') + ' here; not available: ' + missing.join(', '));
    }
    return apply(ctx, plugin.config);
  }).then(() => hostDone(true, ''), (e) => hostDone(false, render(e))));
  hidden('__cordis_invoke', (id, name, json) => {
    const entry = tools.get(name);
    if (entry === undefined) { hostSettle(id, false, 'dynamic tool "' + name + '" is no longer registered'); return; }
    let args;
    try { args = JSON.parse(json); } catch (_) { args = {}; }
    new Promise(function __cordis_call(resolve) { resolve(entry.execute(args, { toolName: name })); }).then((v) => {
      if (v === undefined) { hostSettle(id, true, ''); return; }
      let s;
      try { s = JSON.stringify(v); } catch (_) { s = undefined; }
      if (s === undefined) hostSettle(id, false, 'dynamic tool "' + name + '" returned a value that is not JSON');
      else hostSettle(id, true, s);
    }, (e) => hostSettle(id, false, render(e)));
  });
  hidden('__cordis_stop', () => {
    const errors = [];
    while (effects.length > 0) {
      const entry = effects.pop();
      try { (function __cordis_dispose() { entry.dispose(); })(); } catch (e) { errors.push(render(e)); }
    }
    tools.clear();
    return errors;
  });
})
