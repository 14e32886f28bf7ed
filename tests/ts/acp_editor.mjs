// An editor with unsaved buffers and real terminals, on the official ACP TypeScript SDK.
//
//   node acp_editor.mjs CONFIG_JSON
//
// CONFIG_JSON (one argument) holds:
//   nodeModules   the node_modules directory with @agentclientprotocol/sdk
//   command, args the agent's program (`taskloom acp ...`), started with cwd and env
//   cwd, env      where and with what environment it runs
//   buffers       the editor's unsaved buffers: absolute path -> text (they win over the disk)
//   permissions   the option ids that answer the agent's permission requests, in order
//   steps         what to do after initialize, in order (see below)
//   timeoutMs     the bound of every wait (default 20000)
//
// It initializes offering fs.readTextFile, fs.writeTextFile and terminal, then runs the steps:
//   {"op": "new"}                 session/new in cwd; prints "session"
//   {"op": "prompt", "text"}      session/prompt; prints "stop" with its stop reason
//   {"op": "cancel", "text"}      session/prompt, then on the stdin line "cancel" session/cancel;
//                                 prints "stop" with the prompt's stop reason
//   {"op": "restart"}             closes the agent's input, waits for its exit (prints "exit"),
//                                 starts it again and initializes
//   {"op": "load"}                session/load of the session "new" opened; prints "loaded"
// Throughout it prints, one JSON object a line: "update" (every session/update), "asked" (a
// permission request and the answer given), "fs" (a read or a write and its path), "terminal"
// (a command started: its id, pid and argv), "killed" and "released" (terminal requests). At the
// end it prints "buffers" (the buffer map), closes the agent's input, waits for it to exit and
// prints "done" with its exit code. A failure prints "error" and exits 1.

import { spawn } from "node:child_process";
import { existsSync, readFileSync } from "node:fs";
import { join } from "node:path";
import { createInterface } from "node:readline";
import { Readable, Writable } from "node:stream";
import { pathToFileURL } from "node:url";

const config = JSON.parse(process.argv[2]);
const timeoutMs = config.timeoutMs ?? 20000;
const buffers = { ...(config.buffers ?? {}) };
const answers = [...(config.permissions ?? [])];

function print(obj) {
  process.stdout.write(JSON.stringify(obj) + "\n");
}

function bounded(what, promise) {
  let timer;
  const timeout = new Promise((_, reject) => {
    timer = setTimeout(() => reject(new Error(`timed out waiting for ${what}`)), timeoutMs);
  });
  return Promise.race([promise, timeout]).finally(() => clearTimeout(timer));
}

const acp = await import(
  pathToFileURL(join(config.nodeModules, "@agentclientprotocol/sdk/dist/v1/acp.js")).href
);

const commands = createInterface({ input: process.stdin })[Symbol.asyncIterator]();

// Terminals: real child processes, each the leader of its own process group.
const terminals = new Map();

function startTerminal(params) {
  const extra = Object.fromEntries((params.env ?? []).map((v) => [v.name, v.value]));
  const child = spawn(params.command, params.args ?? [], {
    cwd: params.cwd ?? config.cwd,
    env: { ...process.env, ...extra },
    stdio: ["ignore", "pipe", "pipe"],
    detached: true,
  });
  const term = { child, output: Buffer.alloc(0), truncated: false, status: null };
  const limit = params.outputByteLimit ?? null;
  const take = (chunk) => {
    term.output = Buffer.concat([term.output, chunk]);
    if (limit !== null && term.output.length > limit) {
      let start = term.output.length - limit;
      while (start < term.output.length && (term.output[start] & 0xc0) === 0x80) start++;
      term.output = term.output.subarray(start);
      term.truncated = true;
    }
  };
  child.stdout.on("data", take);
  child.stderr.on("data", take);
  // "close": the command has exited and its output is all read.
  term.closed = new Promise((resolve) =>
    child.on("close", (code, signal) => {
      term.status = { exitCode: code, signal };
      resolve(term.status);
    }),
  );
  const terminalId = `term-${terminals.size + 1}`;
  terminals.set(terminalId, term);
  print({ kind: "terminal", terminalId, pid: child.pid, argv: [params.command, ...(params.args ?? [])] });
  return terminalId;
}

function killTerminal(term) {
  if (term.status === null) {
    try {
      process.kill(-term.child.pid, "SIGTERM"); // the whole group, as an editor's stop does
    } catch {
      // already gone
    }
  }
}

function onPermission(cx) {
  if (answers.length === 0) throw new Error(`an unexpected permission request: ${JSON.stringify(cx.params)}`);
  const optionId = answers.shift();
  print({ kind: "asked", toolCall: cx.params.toolCall, options: cx.params.options.map((o) => o.optionId), answer: optionId });
  return { outcome: { outcome: "selected", optionId } };
}

function onRead(cx) {
  const path = cx.params.path;
  print({ kind: "fs", op: "read", path });
  if (path in buffers) return { content: buffers[path] };
  if (existsSync(path)) return { content: readFileSync(path, "utf8") };
  throw acp.RequestError.resourceNotFound(path);
}

function onWrite(cx) {
  print({ kind: "fs", op: "write", path: cx.params.path });
  buffers[cx.params.path] = cx.params.content; // saving is the user's: the disk is left alone
  return {};
}

const app = acp
  .client({ name: "taskloom-tests" })
  .onNotification("session/update", (cx) => print({ kind: "update", sessionId: cx.params.sessionId, update: cx.params.update }))
  .onRequest("session/request_permission", onPermission)
  .onRequest("fs/read_text_file", onRead)
  .onRequest("fs/write_text_file", onWrite)
  .onRequest("terminal/create", (cx) => ({ terminalId: startTerminal(cx.params) }))
  .onRequest("terminal/output", (cx) => {
    const term = terminals.get(cx.params.terminalId);
    const out = { output: term.output.toString("utf8"), truncated: term.truncated };
    return term.status === null ? out : { ...out, exitStatus: term.status };
  })
  .onRequest("terminal/wait_for_exit", async (cx) => await terminals.get(cx.params.terminalId).closed)
  .onRequest("terminal/kill", (cx) => {
    print({ kind: "killed", terminalId: cx.params.terminalId });
    killTerminal(terminals.get(cx.params.terminalId));
    return {};
  })
  .onRequest("terminal/release", async (cx) => {
    const term = terminals.get(cx.params.terminalId);
    print({ kind: "released", terminalId: cx.params.terminalId });
    killTerminal(term); // release stops a command still running
    await term.closed;
    return {};
  });

let agent = null;

function startAgent() {
  const proc = spawn(config.command, config.args, {
    cwd: config.cwd,
    env: config.env,
    stdio: ["pipe", "pipe", "inherit"],
  });
  const exited = new Promise((resolve) => proc.on("exit", (code) => resolve(code)));
  const stream = acp.ndJsonStream(Writable.toWeb(proc.stdin), Readable.toWeb(proc.stdout));
  return { proc, exited, stream };
}

async function stopAgent() {
  agent.proc.stdin.end();
  const code = await bounded("the agent's exit", agent.exited);
  print({ kind: "exit", code });
}

async function runSteps(cx) {
  await cx.request("initialize", {
    protocolVersion: acp.PROTOCOL_VERSION,
    clientCapabilities: { fs: { readTextFile: true, writeTextFile: true }, terminal: true },
  });
  for (const [index, step] of steps.entries()) {
    if (step.op === "restart") return index + 1; // the rest on a new connection
    if (step.op === "new") {
      sessionId = (await bounded("session/new", cx.request("session/new", { cwd: config.cwd, mcpServers: [] }))).sessionId;
      print({ kind: "session", sessionId });
    } else if (step.op === "prompt" || step.op === "cancel") {
      const prompt = cx.request("session/prompt", { sessionId, prompt: [{ type: "text", text: step.text }] });
      if (step.op === "cancel") {
        const command = await commands.next();
        if (command.value !== "cancel") throw new Error(`unexpected command ${command.value}`);
        await cx.notify("session/cancel", { sessionId });
      }
      const answer = await bounded(`the answer to ${step.text}`, prompt);
      print({ kind: "stop", text: step.text, stopReason: answer.stopReason });
    } else if (step.op === "load") {
      await bounded("session/load", cx.request("session/load", { sessionId, cwd: config.cwd, mcpServers: [] }));
      print({ kind: "loaded", sessionId });
    } else {
      throw new Error(`unknown step ${JSON.stringify(step)}`);
    }
  }
  return steps.length;
}

let steps = config.steps;
let sessionId = null;

try {
  while (steps.length > 0) {
    agent = startAgent();
    const done = await app.connectWith(agent.stream, runSteps);
    steps = steps.slice(done);
    if (steps.length > 0) await stopAgent();
  }
  print({ kind: "buffers", buffers });
  await stopAgent();
  print({ kind: "done" });
  process.exit(0);
} catch (error) {
  print({ kind: "error", message: String(error?.stack ?? error) });
  agent?.proc.kill();
  for (const term of terminals.values()) killTerminal(term);
  process.exit(1);
}
