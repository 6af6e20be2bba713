/**
 * roost's tools for a pi agent: spawn a subagent, message a job, report to the parent, list children.
 *
 * roost loads this file into every pi worker with `-e` (pi runs TypeScript through jiti: no build
 * step). Each tool makes one request to the roost daemon over its control socket, as the calling
 * job: the daemon put ROOST_SOCKET, ROOST_JOB_ID and ROOST_TOKEN in pi's environment, and it stamps
 * the caller as the parent of whatever it spawns. A refusal (depth limit, stopped target, unknown
 * id) becomes a tool error carrying the daemon's own words, so the model can act on it.
 */
import type { ExtensionAPI } from "@mariozechner/pi-coding-agent";
import { StringEnum } from "@mariozechner/pi-ai";
import { Type } from "typebox";
import { createConnection } from "node:net";

const PROTOCOL_VERSION = 3; // roost/protocol.py's PROTOCOL_VERSION (tests/test_pi_driver.py checks they agree)
const TIMEOUT_MS = 30_000;
// roost/client/daemon_wait.py's DAEMON_WAIT and RETRY_EVERY: while no daemon listens (it restarts),
// a call waits for the next one instead of failing pi's turn; only a call the daemon never got.
const DAEMON_WAIT_MS = 60_000;
const RETRY_EVERY_MS = 250;
const CHILDREN_PAGE = 200; // roost/programs/mcp_server.py's CHILDREN_PAGE: one tool result stays readable

type Row = { id: string; title: string; state: string; driver: string; lifetime: string; host: string };

/** Nobody listens on the socket (no file, or refused): the daemon was never asked. */
class NotAsked extends Error {}

/** One request to the daemon as this job, waiting up to DAEMON_WAIT_MS for a daemon to listen. */
async function callRoost(op: string, args: Record<string, unknown>, signal?: AbortSignal): Promise<any> {
  const start = Date.now();
  for (;;) {
    try {
      return await callOnce(op, args, signal);
    } catch (err) {
      if (!(err instanceof NotAsked) || signal?.aborted) throw err;
      const spent = Date.now() - start;
      if (spent >= DAEMON_WAIT_MS) throw new Error(`${err.message} (waited ${Math.round(spent / 1000)}s for the daemon to come back)`);
      await new Promise((resolve) => setTimeout(resolve, RETRY_EVERY_MS));
    }
  }
}

/** One request to the daemon: hello as this job, then `op`; resolves with its result. */
function callOnce(op: string, args: Record<string, unknown>, signal?: AbortSignal): Promise<any> {
  const socketPath = process.env.ROOST_SOCKET;
  const job = process.env.ROOST_JOB_ID;
  const token = process.env.ROOST_TOKEN;
  if (!socketPath || !job || !token) {
    return Promise.reject(new Error("roost tools need ROOST_SOCKET, ROOST_JOB_ID and ROOST_TOKEN: this pi was not started by roost"));
  }
  return new Promise((resolve, reject) => {
    const conn = createConnection(socketPath);
    let buffer = "";
    let settled = false;
    const finish = (error: Error | null, result?: unknown) => {
      if (settled) return;
      settled = true;
      clearTimeout(timer);
      signal?.removeEventListener("abort", onAbort);
      conn.destroy();
      if (error) reject(error);
      else resolve(result);
    };
    const timer = setTimeout(() => finish(new Error(`roost did not answer ${op} within ${TIMEOUT_MS / 1000}s`)), TIMEOUT_MS);
    const onAbort = () => finish(new Error(`${op} was cancelled`));
    signal?.addEventListener("abort", onAbort, { once: true });
    conn.setEncoding("utf8");
    let connected = false;
    conn.on("connect", () => {
      connected = true;
      const hello = { id: 0, op: "hello", args: { version: PROTOCOL_VERSION, client: "pi-tools", job, token } };
      conn.write(JSON.stringify(hello) + "\n" + JSON.stringify({ id: 1, op, args }) + "\n");
    });
    conn.on("data", (chunk: string) => {
      buffer += chunk;
      let newline: number;
      while ((newline = buffer.indexOf("\n")) >= 0) {
        const line = buffer.slice(0, newline);
        buffer = buffer.slice(newline + 1);
        let frame: any;
        try {
          frame = JSON.parse(line);
        } catch {
          return finish(new Error(`roost sent a frame that is not JSON: ${line.slice(0, 200)}`));
        }
        if ("event" in frame) continue;
        if (!frame.ok) return finish(new Error(frame.error?.message ?? `roost refused ${op}`));
        if (frame.id === 1) return finish(null, frame.result);
      }
    });
    conn.on("error", (err: NodeJS.ErrnoException) => {
      const message = `cannot reach roost at ${socketPath}: ${err.message}`;
      const nobody = !connected && (err.code === "ENOENT" || err.code === "ECONNREFUSED");
      finish(nobody ? new NotAsked(message) : new Error(message));
    });
    conn.on("close", () => finish(new Error(`roost closed the connection before answering ${op}`)));
  });
}

function text(value: string) {
  return { content: [{ type: "text" as const, text: value }], details: {} };
}

function describe(row: Row): string {
  return `${row.id}  ${row.state.padEnd(8)} ${row.title}`;
}

export default function (pi: ExtensionAPI) {
  pi.registerTool({
    name: "roost_spawn",
    label: "Spawn subagent",
    description:
      "Start a subagent on a task. It runs on its own, in your working directory, and reports back to you: " +
      "when it finishes or asks something, its report arrives as your next message (a <roost-report> block). " +
      "Returns the new job's id.",
    promptSnippet: "Start a subagent (a separate agent job) on a self-contained task",
    promptGuidelines: [
      "Use roost_spawn for self-contained tasks that can run alongside your own work; give the task everything the subagent needs, as it does not see your conversation.",
      "Reports from subagents arrive as messages made of <roost-report child=... state=... kind=...> blocks; answer a kind=\"question\" report with roost_send.",
    ],
    parameters: Type.Object({
      task: Type.String({ description: "What the subagent should do: its first prompt" }),
      title: Type.Optional(Type.String({ description: "A short title (default: the task's first line)" })),
      lifetime: Type.Optional(StringEnum(["task", "workflow", "session"] as const, {
        description: "task (default): closed once it reports done; workflow/session: kept until you close it",
      })),
      driver: Type.Optional(Type.String({ description: "Which configured agent runs it (default: roost's default driver)" })),
      host: Type.Optional(Type.String({
        description: "Which configured host runs it (\"local\": roost's own machine; default: the host you run on)",
      })),
    }),
    async execute(_toolCallId, params, signal) {
      const row: Row = await callRoost("spawn", {
        prompt: params.task, title: params.title, lifetime: params.lifetime, driver: params.driver, host: params.host,
      }, signal);
      const where = row.host ? `, on host ${row.host}` : "";
      return text(`spawned job ${row.id} ("${row.title}", driver ${row.driver}, lifetime ${row.lifetime}${where}); ` +
        `its report will arrive as a message`);
    },
  });

  pi.registerTool({
    name: "roost_send",
    label: "Message a job",
    description: "Send a message to another roost job (a subagent of yours, say, to answer its question). " +
      "A finished or idle job resumes to take it.",
    parameters: Type.Object({
      job: Type.String({ description: "The job id" }),
      text: Type.String({ description: "The message" }),
    }),
    async execute(_toolCallId, params, signal) {
      const result = await callRoost("send", { job: params.job, text: params.text }, signal);
      return text(`${result.outcome}: ${result.job}`);
    },
  });

  pi.registerTool({
    name: "roost_report",
    label: "Report to parent",
    description: "Report to the job that started you: done (the task is finished), blocked (you need something " +
      "you cannot get yourself) or idle (a progress note). It takes effect when your turn ends.",
    parameters: Type.Object({
      status: StringEnum(["done", "idle", "blocked"] as const),
      text: Type.String({ description: "What to tell the parent: the result, or what you need" }),
    }),
    async execute(_toolCallId, params, signal) {
      const result = await callRoost("report", { status: params.status, text: params.text }, signal);
      return text(`reported ${params.status} (applies ${result.applies})`);
    },
  });

  pi.registerTool({
    name: "roost_children",
    label: "List subagents",
    description: "List the subagents you spawned, with their ids, states and titles, a page at a time: when " +
      "there are more, the last line gives the cursor to pass for the next page.",
    parameters: Type.Object({
      cursor: Type.Optional(Type.String({ description: "Where the previous page ended (leave out for the first page)" })),
    }),
    async execute(_toolCallId, params, signal) {
      const page: { rows: Row[]; next: string | null } = await callRoost(
        "children", { cursor: params.cursor, limit: CHILDREN_PAGE }, signal);
      const lines = page.rows.map(describe);
      if (page.next) lines.push(`more: call roost_children with cursor ${page.next}`);
      return text(lines.length ? lines.join("\n") : "no subagents");
    },
  });
}
