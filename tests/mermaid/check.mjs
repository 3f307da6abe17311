import { JSDOM } from "jsdom";
const dom = new JSDOM("<!doctype html><html><body></body></html>");
globalThis.window = dom.window;
globalThis.document = dom.window.document;
const { default: mermaid } = await import("mermaid");
mermaid.initialize({ startOnLoad: false });
const text = await new Promise((r) => { let d = ""; process.stdin.on("data", (c) => (d += c)); process.stdin.on("end", () => r(d)); });
try {
  const result = await mermaid.parse(text);
  const out = { ok: true, type: result.diagramType };
  if (process.argv.includes("--tasks")) {
    // What the chart holds, as mermaid's gantt database has it: a step name that became a directive shows here.
    const { db } = await mermaid.mermaidAPI.getDiagramFromText(text);
    out.title = db.getDiagramTitle();
    out.tasks = db.getTasks().map((t) => [t.section, t.task.trim(), t.id]);
    out.excludes = db.getExcludes();
  }
  console.log(JSON.stringify(out));
} catch (e) {
  console.log(JSON.stringify({ ok: false, error: String(e.message || e).slice(0, 500) }));
  process.exitCode = 1;
}
