// An ACP client for the tests: drives `agentloop acp` with the official TypeScript SDK
// (@agentclientprotocol/sdk, its client app over newline-delimited JSON) through one
// scenario, and validates every message the agent sends against the package's
// schema/v1/schema.json: the whole message against the schema's `Agent` branch and its
// params or result against the definition its method names. The first invalid message
// ends the run (exit 2) naming its JSON path.
//
//   node driver.mjs SCENARIO -- AGENT_PROGRAM [ARGS...]
//
// Environment: ACP_NODE_MODULES (where .ci/run installed the SDK and ajv), ACP_CWD (the
// session's directory). Prints one JSON report on stdout; logs go to stderr.

import { spawn } from "node:child_process";
import { createRequire } from "node:module";
import { existsSync, readFileSync } from "node:fs";
import { join } from "node:path";
import { pathToFileURL } from "node:url";
import { Readable, Writable } from "node:stream";

const modules = process.env.ACP_NODE_MODULES;
const cwd = process.env.ACP_CWD;
const sdkDir = join(modules, "@agentclientprotocol/sdk");
const acp = await import(pathToFileURL(join(sdkDir, "dist/v1/stable/acp.js")).href);
const require = createRequire(join(modules, "noop.js"));
const Ajv2020 = require("ajv/dist/2020").default;
const schema = JSON.parse(readFileSync(join(sdkDir, "schema/v1/schema.json"), "utf8"));

const ajv = new Ajv2020({ strict: false, validateFormats: false, allErrors: true });
ajv.addSchema(schema, "acp");
const validators = new Map();
function validator(def) {
  if (!validators.has(def)) {
    validators.set(def, ajv.compile({ $ref: `acp#/$defs/${def}` }));
  }
  return validators.get(def);
}
const whole = ajv.compile({ $ref: "acp#/anyOf/0" });

// What the agent's answer to each of our methods must be, and its requests' params.
const RESPONSES = {
  initialize: "InitializeResponse",
  authenticate: "AuthenticateResponse",
  "session/new": "NewSessionResponse",
  "session/load": "LoadSessionResponse",
  "session/resume": "ResumeSessionResponse",
  "session/list": "ListSessionsResponse",
  "session/close": "CloseSessionResponse",
  "session/set_mode": "SetSessionModeResponse",
  "session/set_config_option": "SetSessionConfigOptionResponse",
  "session/prompt": "PromptResponse",
};
const REQUESTS = {
  "session/request_permission": "RequestPermissionRequest",
  "fs/read_text_file": "ReadTextFileRequest",
  "fs/write_text_file": "WriteTextFileRequest",
  "session/update": "SessionNotification",
};

// Each kind of session update and the definition of its fields: an invalid update is
// reported against its own kind, not the first branch of the union.
const UPDATES = {
  user_message_chunk: "ContentChunk",
  agent_message_chunk: "ContentChunk",
  agent_thought_chunk: "ContentChunk",
  tool_call: "ToolCall",
  tool_call_update: "ToolCallUpdate",
  plan: "Plan",
  available_commands_update: "AvailableCommandsUpdate",
  current_mode_update: "CurrentModeUpdate",
  config_option_update: "ConfigOptionUpdate",
  session_info_update: "SessionInfoUpdate",
  usage_update: "UsageUpdate",
};

const sent = new Map(); // our request ids → methods
const messages = []; // every message the agent sent, parsed
let checked = 0;

/// The most specific of a failed validation's errors (the deepest path: under a `oneOf`
/// the branch the message meant), as `PATH: message`.
function worst(errors) {
  const e = [...errors].sort((a, b) => b.instancePath.length - a.instancePath.length)[0];
  return `${e.instancePath || "/"}: ${e.message} (${JSON.stringify(e.params)})`;
}

function fail(why) {
  process.stderr.write(`driver: ${why}\n`);
  process.stdout.write(JSON.stringify({ ok: false, error: why }) + "\n");
  process.exit(2);
}

function check(line) {
  let message;
  try {
    message = JSON.parse(line);
  } catch (e) {
    fail(`the agent wrote a line that is not JSON: ${line.slice(0, 200)}`);
  }
  const problems = (validate, what) => {
    const update = message.params?.update;
    const kind = UPDATES[update?.sessionUpdate];
    if (message.method === "session/update" && kind && !validator(kind)(update)) {
      fail(`invalid ${update.sessionUpdate} update (${kind}) at /params/update${worst(validator(kind).errors)} in ${line.slice(0, 500)}`);
    }
    if (!validate(message.params ?? message.result ?? message.error ?? message)) {
      fail(`invalid ${what} at ${worst(validate.errors)} in ${line.slice(0, 500)}`);
    }
  };
  if (message.method !== undefined) {
    const def = REQUESTS[message.method];
    if (!def) fail(`the agent called a method the scenario does not expect: ${message.method}`);
    problems(validator(def), `${message.method} params (${def})`);
  } else if (message.error !== undefined) {
    problems(validator("Error"), "error");
  } else {
    const method = sent.get(message.id);
    const def = RESPONSES[method];
    if (!def) fail(`an answer to no request of ours: ${line.slice(0, 200)}`);
    problems(validator(def), `${method} result (${def})`);
  }
  // And the message as a whole against the schema's agent side.
  if (!whole(message)) {
    fail(`invalid message at ${worst(whole.errors)} in ${line.slice(0, 500)}`);
  }
  checked += 1;
  messages.push(message);
}

/// Starts the agent; the SDK reads its stdout through the validator.
function startAgent() {
  const [program, ...args] = process.argv.slice(process.argv.indexOf("--") + 1);
  const child = spawn(program, args, { stdio: ["pipe", "pipe", "inherit"] });
  let pending = "";
  const checked = new Readable({ read() {} });
  child.stdout.on("data", (chunk) => {
    pending += chunk.toString("utf8");
    let at;
    while ((at = pending.indexOf("\n")) >= 0) {
      const line = pending.slice(0, at);
      pending = pending.slice(at + 1);
      if (line.trim()) check(line);
      checked.push(line + "\n");
    }
  });
  child.stdout.on("end", () => checked.push(null));
  // Our writes pass through here: remember which method each request id is.
  const input = new Writable({
    write(chunk, _, done) {
      for (const line of chunk.toString("utf8").split("\n")) {
        if (!line.trim()) continue;
        const message = JSON.parse(line);
        if (message.method !== undefined && message.id !== undefined) sent.set(message.id, message.method);
      }
      child.stdin.write(chunk, done);
    },
  });
  const exited = new Promise((resolve) => child.on("exit", (code, signal) => resolve({ code, signal })));
  const stream = acp.ndJsonStream(Writable.toWeb(input), Readable.toWeb(checked));
  return { child, stream, exited };
}

/// Runs `work(agent, log)` against a fresh agent process; closes its stdin after.
async function withAgent(options, work) {
  const { child, stream, exited } = startAgent();
  const log = { updates: [], permissions: [], writes: [], reads: [] };
  const app = acp
    .client({ name: "agentloop-tests" })
    .onNotification(acp.methods.client.session.update, (ctx) => {
      log.updates.push({ sessionId: ctx.params.sessionId, ...ctx.params.update, at: Date.now() });
    })
    .onRequest(acp.methods.client.session.requestPermission, async (ctx) => {
      log.permissions.push(ctx.params);
      const optionId = await options.permission(ctx.params);
      return { outcome: optionId ? { outcome: "selected", optionId } : { outcome: "cancelled" } };
    })
    .onRequest(acp.methods.client.fs.readTextFile, (ctx) => {
      log.reads.push(ctx.params);
      return { content: options.buffers?.[ctx.params.path] ?? readFileSync(ctx.params.path, "utf8") };
    })
    .onRequest(acp.methods.client.fs.writeTextFile, (ctx) => {
      log.writes.push(ctx.params);
      return {};
    });
  const result = await app.connectWith(stream, (agent) => work(agent, log));
  child.stdin.end();
  const started = Date.now();
  const exit = await exited;
  return { result, log, exit: { ...exit, ms: Date.now() - started } };
}

/// [`withAgent`], its result with the agent's exit in it.
async function session(options, work) {
  const { result, exit } = await withAgent(options, work);
  return { ...result, exit };
}

const fs = (read, write) => ({ fs: { readTextFile: read, writeTextFile: write }, terminal: false });
const init = (agent, caps = fs(false, false)) =>
  agent.request(acp.methods.agent.initialize, { protocolVersion: 1, clientCapabilities: caps });
const newSession = (agent) => agent.request(acp.methods.agent.session.new, { cwd, mcpServers: [] });
const prompt = (agent, sessionId, text) =>
  agent.request(acp.methods.agent.session.prompt, { sessionId, prompt: [{ type: "text", text }] });
const allow = async () => "allow_once";
const waitFor = async (what, test) => {
  const deadline = Date.now() + 20000;
  while (!test()) {
    if (Date.now() > deadline) throw new Error(`timed out waiting for ${what}`);
    await new Promise((r) => setTimeout(r, 10));
  }
};

const scenarios = {
  // Only initialize: for checking the checker with an agent that answers wrongly.
  async init() {
    return session({ permission: allow }, async (agent) => ({ initialized: await init(agent) }));
  },
  // initialize → new → the three-round task (a command, a read, an answer) → an edit.
  async task() {
    return session({ permission: allow }, async (agent, log) => {
      const initialized = await init(agent);
      const session = await newSession(agent);
      const first = await prompt(agent, session.sessionId, "write hello to out.txt and read it back");
      const second = await prompt(agent, session.sessionId, "now change hello to goodbye");
      return { initialized, session, stops: [first, second], ...log };
    });
  },
  // A command that sleeps is cancelled once it runs.
  async cancel() {
    return session({ permission: allow }, async (agent, log) => {
      await init(agent);
      const session = await newSession(agent);
      const answer = prompt(agent, session.sessionId, "sleep");
      await waitFor("the command to start", () => existsSync(join(cwd, "started")));
      const cancelledAt = Date.now();
      await agent.notify(acp.methods.agent.session.cancel, { sessionId: session.sessionId });
      const stop = await answer;
      const ms = Date.now() - cancelledAt;
      // The history is valid for the next prompt.
      const next = await prompt(agent, session.sessionId, "and now?");
      return { stop, next, cancelMs: ms, ...log };
    });
  },
  // The user rejects a write.
  async reject() {
    return session({ permission: async () => "reject_once" }, async (agent, log) => {
      await init(agent);
      const session = await newSession(agent);
      const stop = await prompt(agent, session.sessionId, "write a file");
      return { stop, ...log };
    });
  },
  // A session recorded by one agent process is loaded by another.
  async load() {
    const first = await withAgent({ permission: allow }, async (agent, log) => {
      await init(agent);
      const session = await newSession(agent);
      const stop = await prompt(agent, session.sessionId, "write hello to out.txt and read it back");
      return { sessionId: session.sessionId, stop, ...log };
    });
    const second = await withAgent({ permission: allow }, async (agent, log) => {
      const initialized = await init(agent);
      const listed = await agent.request(acp.methods.agent.session.list, { cwd });
      const before = log.updates.length;
      const loaded = await agent.request(acp.methods.agent.session.load, {
        sessionId: first.result.sessionId,
        cwd,
        mcpServers: [],
      });
      // Every replayed update came before the answer.
      const replayed = log.updates.slice(before);
      return { initialized, listed, loaded, replayed };
    });
    return { first: first.result, second: second.result, exits: [first.exit, second.exit] };
  },
  // Two sessions on one connection, each waiting for the other's command to start.
  async concurrent() {
    return session({ permission: allow }, async (agent, log) => {
      await init(agent);
      const [a, b] = [await newSession(agent), await newSession(agent)];
      const stops = await Promise.all([
        prompt(agent, a.sessionId, "meet the other session"),
        prompt(agent, b.sessionId, "meet the other session"),
      ]);
      return { sessions: [a.sessionId, b.sessionId], stops, ...log };
    });
  },
  // The editor's buffers: reads and writes go through the client.
  async editor_files() {
    const buffers = { [join(cwd, "notes.txt")]: "the unsaved buffer\n" };
    return session({ permission: allow, buffers }, async (agent, log) => {
      await init(agent, fs(true, true));
      const session = await newSession(agent);
      const stop = await prompt(agent, session.sessionId, "read the notes, then write new.txt");
      return { stop, ...log };
    });
  },
  // Modes and the model option.
  async modes() {
    return session({ permission: allow }, async (agent, log) => {
      await init(agent);
      const session = await newSession(agent);
      const setMode = await agent.request(acp.methods.agent.session.setMode, {
        sessionId: session.sessionId,
        modeId: "plan",
      });
      const stop = await prompt(agent, session.sessionId, "plan it");
      const model = await agent.request(acp.methods.agent.session.setConfigOption, {
        sessionId: session.sessionId,
        configId: "model",
        value: session.configOptions[0].options[1].value,
      });
      const after = await prompt(agent, session.sessionId, "and with the other model?");
      return { session, setMode, stop, model, after, ...log };
    });
  },
};

const name = process.argv[2];
if (!scenarios[name]) fail(`unknown scenario ${name}`);
try {
  const report = await scenarios[name]();
  process.stdout.write(JSON.stringify({ ok: true, checked, report }) + "\n");
  process.exit(0);
} catch (e) {
  fail(`${name}: ${e?.stack ?? e}`);
}
