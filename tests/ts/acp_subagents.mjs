// An editor that offers subagent sessions, on the official ACP TypeScript SDK, driving an agent.
//
//   node acp_subagents.mjs CONFIG_JSON
//
// CONFIG_JSON (one argument) holds:
//   nodeModules   the node_modules directory with @agentclientprotocol/sdk
//   command, args the agent's program (`taskloom acp ...`), started with cwd and env
//   cwd, env      where and with what environment it runs
//   prompt        the prompt sent to a new session
//   timeoutMs     the bound of every wait (default 20000)
//
// It initializes with `subagents: {}`, opens a session, sends the prompt and prints, one JSON
// object a line: "update" (every session/update: its sessionId and update), "stop" (the
// prompt's stop reason), then "child" once a child session announced by a subagent_update is
// running a tool call. It then reads stdin: the line "cancel" sends session/cancel for that
// child. It prints "idle" when the child's state is idle, and "woke" when the parent session
// streams text again after that (a turn of its own, on what the model was told); then it
// closes the agent's input, waits for it to exit and prints "done" with its exit code. A
// failure prints "error" and exits 1.

import { spawn } from "node:child_process";
import { join } from "node:path";
import { createInterface } from "node:readline";
import { Readable, Writable } from "node:stream";
import { pathToFileURL } from "node:url";

const config = JSON.parse(process.argv[2]);
const timeoutMs = config.timeoutMs ?? 20000;

function print(obj) {
  process.stdout.write(JSON.stringify(obj) + "\n");
}

const acp = await import(
  pathToFileURL(join(config.nodeModules, "@agentclientprotocol/sdk/dist/v1/unstable/acp.js")).href
);

// Every update seen, and the waits for one.
const seen = [];
const waiters = [];

function waitFor(what, test) {
  return new Promise((resolve, reject) => {
    const found = seen.find(test);
    if (found) return resolve(found);
    const timer = setTimeout(() => reject(new Error(`timed out waiting for ${what}`)), timeoutMs);
    waiters.push({ test, resolve, timer });
  });
}

function saw(params) {
  seen.push(params);
  print({ kind: "update", sessionId: params.sessionId, update: params.update });
  for (const w of [...waiters]) {
    if (w.test(params)) {
      clearTimeout(w.timer);
      waiters.splice(waiters.indexOf(w), 1);
      w.resolve(params);
    }
  }
}

const lines = createInterface({ input: process.stdin });
const commands = lines[Symbol.asyncIterator]();

const proc = spawn(config.command, config.args, {
  cwd: config.cwd,
  env: config.env,
  stdio: ["pipe", "pipe", "inherit"],
});
const exited = new Promise((resolve) => proc.on("exit", (code) => resolve(code)));
const stream = acp.ndJsonStream(Writable.toWeb(proc.stdin), Readable.toWeb(proc.stdout));

const app = acp
  .client({ name: "taskloom-tests" })
  .onNotification("session/update", (cx) => saw(cx.params))
  .onRequest("session/request_permission", (cx) => {
    const allow = cx.params.options.find((o) => o.kind.startsWith("allow"));
    return { outcome: { outcome: "selected", optionId: allow.optionId } };
  });

try {
  await app.connectWith(stream, async (cx) => {
    await cx.request("initialize", {
      protocolVersion: acp.PROTOCOL_VERSION,
      clientCapabilities: { subagents: {} },
    });
    const { sessionId } = await cx.request("session/new", { cwd: config.cwd, mcpServers: [] });
    const answer = await cx.request("session/prompt", {
      sessionId,
      prompt: [{ type: "text", text: config.prompt }],
    });
    print({ kind: "stop", stopReason: answer.stopReason });
    const hello = await waitFor(
      "a child session",
      (p) => p.sessionId === sessionId && p.update.sessionUpdate === "subagent_update",
    );
    const child = hello.update.sessionId;
    await waitFor("the child's tool call", (p) => p.sessionId === child && p.update.sessionUpdate === "tool_call");
    print({ kind: "child", sessionId: child });
    const command = await commands.next();
    if (command.value !== "cancel") throw new Error(`unexpected command ${command.value}`);
    const before = seen.length;
    await cx.notify("session/cancel", { sessionId: child });
    const idle = await waitFor(
      "the child idle",
      (p) => p.update.sessionUpdate === "subagent_update" && p.update.sessionId === child &&
        p.update.state?.state === "idle",
    );
    print({ kind: "idle", state: idle.update.state });
    await waitFor(
      "the parent's next turn",
      (p) => seen.indexOf(p) >= before && p.sessionId === sessionId &&
        p.update.sessionUpdate === "agent_message_chunk",
    );
    print({ kind: "woke" });
  });
  proc.stdin.end();
  print({ kind: "done", code: await exited });
  process.exit(0);
} catch (error) {
  print({ kind: "error", message: String(error?.stack ?? error) });
  proc.kill();
  process.exit(1);
}
