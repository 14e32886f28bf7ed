// Drives one session of the TypeScript Agent SDK's query() and prints what the program sees.
//
//   node sdk_session.mjs CONFIG_JSON
//
// CONFIG_JSON (one argument) holds:
//   nodeModules   the node_modules directory with @anthropic-ai/claude-agent-sdk and zod
//   options       query()'s options as JSON (pathToClaudeCodeExecutable, cwd, env, model, ...)
//   prompt        a string prompt; or, without it, the prompt is an async iterable fed by steps
//   steps         what to do while the session runs, in order (see runStep)
//   canUseTool    {tool name: answer}: a canUseTool callback giving that answer ("ask" is
//                 printed and allowed; an answer's updatedInput is passed on)
//   sdkMcp        true: an in-process MCP server "calc" with one tool, "add"
//   hooks         {event: [{matcher, answer}]}: options.hooks, each a callback that prints its
//                 input ("hook") and returns the answer ({} if none)
//   timeoutMs     the bound of every wait (default 20000)
//
// Every line printed is one JSON object with "kind": "message" (an SDK message, with "t", the
// milliseconds since the start), "can_use_tool", "tool_called", "hook", "call" (a Query
// method's answer, or with "sdk": true a function of the SDK's own), "query_error" (what the query threw: the SDK throws after an error result), "error"
// (a step failed; the exit code is 1) and last "done".

import { pathToFileURL } from "node:url";
import { join } from "node:path";
import { writeFile } from "node:fs/promises";

const config = JSON.parse(process.argv[2]);
const started = Date.now();
const timeoutMs = config.timeoutMs ?? 20000;

function print(obj) {
  process.stdout.write(JSON.stringify({ t: Date.now() - started, ...obj }) + "\n");
}

function load(path) {
  return import(pathToFileURL(join(config.nodeModules, path)).href);
}

const sdk = await load("@anthropic-ai/claude-agent-sdk/sdk.mjs");

// The messages seen so far, and the steps waiting for one.
const seen = [];
let cursor = 0; // the first message a "wait" may match
const waiters = [];
let finished = false;

function matches(message, want) {
  return Object.entries(want).every(([key, value]) => message[key] === value);
}

function waitFor(want) {
  return new Promise((resolve, reject) => {
    const timer = setTimeout(
      () => reject(new Error(`timed out waiting for ${JSON.stringify(want)}`)),
      timeoutMs,
    );
    const waiter = { want, resolve, reject, timer };
    waiters.push(waiter);
    check();
  });
}

function check() {
  for (const waiter of [...waiters]) {
    const index = seen.findIndex((m, i) => i >= cursor && matches(m, waiter.want));
    if (index >= 0) {
      cursor = index + 1;
      clearTimeout(waiter.timer);
      waiters.splice(waiters.indexOf(waiter), 1);
      waiter.resolve(seen[index]);
    } else if (finished) {
      clearTimeout(waiter.timer);
      waiters.splice(waiters.indexOf(waiter), 1);
      waiter.reject(new Error(`the session ended before ${JSON.stringify(waiter.want)}`));
    }
  }
}

// The prompt as an async iterable: "send" steps put messages in, "end" closes it.
const queue = [];
let wake = null;
let closed = false;

async function* prompts() {
  while (true) {
    while (queue.length) yield queue.shift();
    if (closed) return;
    await new Promise((resolve) => (wake = resolve));
    wake = null;
  }
}

function push(item) {
  if (item !== null) queue.push(item);
  else closed = true;
  wake?.();
}

function userMessage(text) {
  return {
    type: "user",
    message: { role: "user", content: text },
    parent_tool_use_id: null,
    session_id: "",
  };
}

// The last task_started's task id, for {"call": "stopTask", "args": ["$task"]}.
// "$session": the init message's session id.
function resolveArg(arg) {
  if (arg === "$session") return seen.find((m) => m.type === "system" && m.subtype === "init")?.session_id;
  if (arg !== "$task") return arg;
  const last = [...seen].reverse().find((m) => m.type === "system" && m.subtype === "task_started");
  return last?.task_id;
}

async function runStep(q, step) {
  if ("send" in step) push(userMessage(step.send));
  else if ("release" in step) {
    // Opens a FIFO (or file) for writing: a command held on reading it goes on.
    await writeFile(step.release, (step.text ?? "go") + "\n");
    print({ kind: "released", path: step.release });
  } else if ("sdk" in step) {
    const value = await sdk[step.sdk](...(step.args ?? []).map(resolveArg));
    print({ kind: "call", name: step.sdk, sdk: true, value: value ?? null });
  }
  else if ("wait" in step) await waitFor(step.wait);
  else if ("end" in step) push(null);
  else if ("call" in step) {
    const asked = Date.now();
    const value = await q[step.call](...(step.args ?? []).map(resolveArg));
    print({ kind: "call", name: step.call, value: value ?? null, ms: Date.now() - asked });
  } else throw new Error(`unknown step ${JSON.stringify(step)}`);
}

async function sdkMcpServer() {
  const { z } = await load("zod/index.js");
  const add = sdk.tool(
    "add",
    "Add two numbers",
    { a: z.number(), b: z.number() },
    async (args) => {
      print({ kind: "tool_called", name: "add", args });
      return { content: [{ type: "text", text: `sum is ${args.a + args.b}` }] };
    },
  );
  return sdk.createSdkMcpServer({ name: "calc", version: "1.0.0", tools: [add] });
}

function canUseTool(rules) {
  return async (name, input, context) => {
    print({ kind: "can_use_tool", name, input, tool_use_id: context?.toolUseID ?? null });
    const answer = rules[name] ?? { behavior: "deny", message: `no rule for ${name}` };
    if (answer.behavior === "allow") return { behavior: "allow", updatedInput: answer.updatedInput ?? input };
    return answer;
  };
}

function hooks(config) {
  const out = {};
  for (const [event, matchers] of Object.entries(config)) {
    out[event] = matchers.map(({ matcher, answer }) => ({
      matcher,
      hooks: [
        async (input, toolUseID) => {
          print({ kind: "hook", event, input, tool_use_id: toolUseID ?? null });
          return answer ?? {};
        },
      ],
    }));
  }
  return out;
}

async function main() {
  const options = { ...config.options };
  if (config.canUseTool) options.canUseTool = canUseTool(config.canUseTool);
  if (config.hooks) options.hooks = hooks(config.hooks);
  if (config.sdkMcp) options.mcpServers = { ...options.mcpServers, calc: await sdkMcpServer() };
  if (options.stderr === true) options.stderr = (text) => print({ kind: "stderr", text });
  const streaming = typeof config.prompt !== "string";
  const q = sdk.query({ prompt: streaming ? prompts() : config.prompt, options });
  const reading = (async () => {
    try {
      for await (const message of q) {
        seen.push(message);
        print({ kind: "message", message });
        check();
      }
    } catch (error) {
      // The SDK throws after an error result: printed for the test to judge.
      print({ kind: "query_error", error: String(error?.message ?? error) });
    } finally {
      finished = true;
      check();
    }
  })();
  try {
    for (const step of config.steps ?? []) await runStep(q, step);
  } finally {
    if (streaming) push(null);
    await reading;
  }
}

const watchdog = setTimeout(() => {
  print({ kind: "error", error: "the whole session took longer than 3 bounds" });
  process.exit(1);
}, 3 * timeoutMs);

try {
  await main();
  print({ kind: "done" });
} catch (error) {
  print({ kind: "error", error: String(error?.stack ?? error) });
  process.exitCode = 1;
} finally {
  clearTimeout(watchdog);
}
