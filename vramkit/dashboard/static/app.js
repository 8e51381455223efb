// vramkit dashboard: draws what the server computed (/api/*). No memory arithmetic here: the plan,
// its memory segments and the predicted-vs-actual rows come from vramkit's core. Charts are small SVGs.
"use strict";

const GiB = 2 ** 30;
const SVGNS = "http://www.w3.org/2000/svg";
const params = new URLSearchParams(location.search);
const only = params.get("panel");            // ?panel=plan|live|server|bench shows one panel (screenshots)
const COLORS = {
  "reserved": "#d1d5db", "context": "#9ca3af", "weights.embed_tokens": "#1e3a8a", "weights.lm_head": "#1d4ed8",
  "weights.attention": "#3b82f6", "weights.mlp": "#60a5fa", "weights.norms": "#93c5fd", "weights.load": "#bfdbfe",
  "kv": "#16a34a", "buffers": "#a3a3a3", "graphs": "#c026d3", "comm": "#78716c", "activations": "#ea580c",
  "free": "#f3f4f6", "host-free": "#f3f4f6", "hicache": "#0d9488", "offload": "#5eead4",
};
const SERIES = ["#2563eb", "#16a34a", "#ea580c", "#7c3aed", "#db2777", "#0891b2", "#65a30d", "#b45309"];

// --- small helpers ------------------------------------------------------------------------------
function h(tag, attrs, ...kids) {
  const el = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs || {})) {
    if (v === null || v === undefined || v === false) continue;
    if (k === "class") el.className = v; else el.setAttribute(k, v === true ? "" : v);
  }
  for (const kid of kids.flat(Infinity)) {
    if (kid === null || kid === undefined || kid === false) continue;
    el.append(kid instanceof Node ? kid : document.createTextNode(String(kid)));
  }
  return el;
}
function s(tag, attrs, ...kids) {
  const el = document.createElementNS(SVGNS, tag);
  for (const [k, v] of Object.entries(attrs || {})) el.setAttribute(k, v);
  for (const kid of kids.flat(Infinity)) if (kid != null && kid !== false) el.append(kid instanceof Node ? kid : document.createTextNode(String(kid)));
  return el;
}
const gib = (b, d = 2) => (b === null || b === undefined) ? "n/a" : (b / GiB).toFixed(d) + " GiB";
const num = (n, d = 0) => (n === null || n === undefined) ? "n/a" : Number(n).toLocaleString("en-US", { maximumFractionDigits: d, minimumFractionDigits: d });
function table(head, rows, numeric = []) {
  return h("table", {}, h("thead", {}, h("tr", {}, head.map((c, i) => h("th", { class: numeric.includes(i) ? "num" : null }, c)))),
    h("tbody", {}, rows.map(r => h("tr", {}, r.map((c, i) => h("td", { class: numeric.includes(i) ? "num" : null }, c))))));
}
async function api(path) {
  const r = await fetch(path, { credentials: "same-origin", cache: "no-store" });
  let body = null;
  try { body = await r.json(); } catch (e) { body = null; }
  if (!r.ok) {
    const m = body && body.error ? body.error.message + (body.error.todo ? " -> " + body.error.todo : "") : r.status + " " + r.statusText;
    throw new Error(m);
  }
  return body;
}
function fill(id, ...kids) {
  const el = document.getElementById(id);
  el.replaceChildren(...kids.flat(Infinity).filter(k => k !== null && k !== undefined && k !== false));
  return el;
}
function done(panel, state = "ready") { document.getElementById("panel-" + panel).dataset.state = state; }
function fail(panel, out, err) { fill(out, h("p", { class: "error" }, String(err.message || err))); done(panel, "error"); }

// --- charts ---------------------------------------------------------------------------------------
// One horizontal stacked bar: segments [{key,label,bytes}] over `total`; `marks` are vertical lines (fractions).
function stackedBar(segments, total, marks = [], width = 900, height = 30, fmt = gib) {
  const svg = s("svg", { viewBox: `0 0 ${width} ${height + 16}`, role: "img", class: "bar", style: `max-width:${width * 1.5}px` });
  let x = 0;
  for (const seg of segments) {
    const w = Math.max(0, seg.bytes) / total * width;
    const r = s("rect", { x: x.toFixed(2), y: 0, width: w.toFixed(2), height, fill: COLORS[seg.key] || "#cbd5e1",
      "data-key": seg.key, stroke: "#fff", "stroke-width": 0.5 });
    r.append(s("title", {}, `${seg.label}: ${fmt(seg.bytes)}`));
    svg.append(r);
    x += w;
  }
  for (const m of marks) {
    const mx = (m.at * width).toFixed(1);
    svg.append(s("line", { x1: mx, x2: mx, y1: 0, y2: height + 4, stroke: m.color || "#b91c1c", "stroke-width": 1.5, "stroke-dasharray": "3 2" }));
    if (m.inside) svg.append(s("text", { x: mx - 3, y: 12, "text-anchor": "end" }, m.label));   // above the threshold labels
    else svg.append(s("text", { x: Math.min(width - 24, mx - 10), y: height + 14 }, m.label));
  }
  return svg;
}
function legend(segments) {
  return h("div", { class: "legend" }, segments.map(seg => [
    h("span", { class: "swatch", style: `background:${COLORS[seg.key] || "#cbd5e1"}` }),
    h("span", {}, seg.label), h("span", { class: "num" }, gib(seg.bytes)), h("span", { class: "dim" }, seg.source)]));
}
// Line chart: series [{name, points:[{x,y}]}]; hlines [{y,label}]
function lineChart(series, opts = {}) {
  const W = opts.width || 560, H = opts.height || 180, L = 48, R = 10, T = 10, B = 30;
  const pts = series.flatMap(se => se.points).filter(p => p.y !== null && p.y !== undefined);
  const svg = s("svg", { width: W, height: H, viewBox: `0 0 ${W} ${H}`, role: "img" });
  if (!pts.length) { svg.append(s("text", { x: L, y: H / 2 }, "no data")); return svg; }
  const xs = pts.map(p => p.x), ys = pts.map(p => p.y).concat((opts.hlines || []).map(l => l.y));
  let x0 = Math.min(...xs), x1 = Math.max(...xs), y0 = opts.y0 !== undefined ? opts.y0 : Math.min(0, ...ys), y1 = opts.y1 || Math.max(...ys) * 1.08;
  if (x1 === x0) x1 = x0 + 1;
  if (y1 === y0) y1 = y0 + 1;
  const logx = opts.logx && x0 > 0;
  const fx = v => L + (logx ? Math.log(v / x0) / Math.log(x1 / x0) : (v - x0) / (x1 - x0)) * (W - L - R);
  const fy = v => H - B - (v - y0) / (y1 - y0) * (H - T - B);
  svg.append(s("line", { x1: L, x2: W - R, y1: H - B, y2: H - B, stroke: "#9ca3af" }));
  svg.append(s("line", { x1: L, x2: L, y1: T, y2: H - B, stroke: "#9ca3af" }));
  for (let i = 0; i <= 4; i++) {
    const v = y0 + (y1 - y0) * i / 4;
    svg.append(s("text", { x: 2, y: fy(v) + 4 }, (opts.yfmt || (a => a.toFixed(0)))(v)));
  }
  const xticks = opts.xticks || [...new Set(xs)].slice(0, 12);
  for (const v of xticks) svg.append(s("text", { x: fx(v) - 10, y: H - B + 14 }, (opts.xfmt || String)(v)));
  if (opts.xlabel) svg.append(s("text", { x: W - R - 6 * opts.xlabel.length, y: H - 2 }, opts.xlabel));
  for (const l of opts.hlines || []) {
    svg.append(s("line", { x1: L, x2: W - R, y1: fy(l.y), y2: fy(l.y), stroke: l.color || "#b91c1c", "stroke-dasharray": "4 3" }));
    if (!opts.quietLines) svg.append(s("text", { x: W - R - 30, y: fy(l.y) - 2 }, l.label));
  }
  series.forEach((se, i) => {
    const p = se.points.filter(q => q.y !== null && q.y !== undefined);
    if (!p.length) return;
    const color = se.color || SERIES[i % SERIES.length];
    svg.append(s("polyline", { points: p.map(q => `${fx(q.x).toFixed(1)},${fy(q.y).toFixed(1)}`).join(" "), fill: "none", stroke: color, "stroke-width": 2 }));
    for (const q of p) svg.append(s("circle", { cx: fx(q.x), cy: fy(q.y), r: 2.5, fill: color }));
  });
  return svg;
}
function seriesLegend(names) {
  return h("div", { class: "dim" }, names.map((n, i) => h("span", { style: "margin-right:1em" },
    h("span", { class: "swatch", style: `background:${SERIES[i % SERIES.length]}` }), " ", n)));
}

// --- plan explorer --------------------------------------------------------------------------------
let catalog = null;
function option(value, label, selected) { return h("option", { value, selected: selected || null }, label); }
function setupForm(cat, meta) {
  const f = document.getElementById("plan-form");
  f.preset.replaceChildren(option("", "(none)"), ...cat.presets.map(p => option(p.name, p.name, p.name === "optimized")));
  f.model.replaceChildren(option("", "(preset's)"), ...cat.models.map(m => option(m.name, m.name)));
  const card = meta.mode === "replay" && meta.nvml_card ? `auto: ${meta.nvml_card.nvml_name} (captured)` : "auto: the card NVML sees";
  f.gpu.replaceChildren(...cat.gpus.map(g => option(g.name, g.label, g.name === cat.default_gpu)), option("auto", card));
  // one field per knob declared in vramkit/core/plan/knobs.py (name, unit, range, help come from there)
  fill("knob-fields", cat.knobs.map(k => h("label", { title: `${k.help}; ${k.range}${k.unit ? ", " + k.unit : ""} (${k.flag})` },
    k.name.replace(/_/g, " ") + ((u => u && u.length <= 10 ? ` [${u}]` : "")(k.unit.split(" (")[0])),
    k.choices.length ? h("select", { name: k.name }, option("", "(preset's)"), k.choices.map(c => option(c, c)))
      : h("input", { name: k.name, placeholder: "preset", size: 8 }))));
  for (const [k, v] of params) {
    const el = f.elements[k];
    if (!el || k === "panel") continue;
    if (el.tagName === "SELECT" && ![...el.options].some(o => o.value === v)) {
      if (k === "model") f.model_dir.value = v;          // a folder, not a catalogued name
      continue;
    }
    el.value = v;
  }
  f.addEventListener("submit", ev => { ev.preventDefault(); loadPlan(); });
  f.preset.addEventListener("change", () => loadPlan());
  f.gpu.addEventListener("change", () => loadPlan());
}
function planQuery() {
  const f = document.getElementById("plan-form");
  const q = new URLSearchParams();
  for (const el of f.elements) {
    if (!el.name || el.value === "" || el.name === "model_dir") continue;
    q.set(el.name, el.value);
  }
  if (f.model_dir.value.trim()) q.set("model", f.model_dir.value.trim());
  return q;
}
async function loadPlan() {
  fill("plan-out", h("p", { class: "dim" }, "planning…"));
  try { renderPlan(await api("api/plan?" + planQuery())); done("plan"); }
  catch (e) { fail("plan", "plan-out", e); }
}
function renderPlan(p) {
  const m = p.memory;
  const marks = [{ at: p.peak_vram_bytes / m.gpu_total_bytes, label: "peak", color: "#111827" }];
  const k = p.knobs;
  const out = [
    h("p", {}, h("span", { id: "plan-verdict", class: "verdict " + (p.fits ? "fits" : "nofit") }, p.fits ? "FITS" : "DOES NOT FIT"),
      ` ${p.model} on ${p.gpu_label}` + (p.preset ? ` [preset ${p.preset}]` : "")),
    p.reasons.length ? h("ul", { class: "reasons" }, p.reasons.map(r => h("li", {}, r))) : null,
    p.notes.length ? h("ul", { class: "notes" }, p.notes.map(r => h("li", {}, r))) : null,
    h("h3", {}, `GPU memory per card: peak ${gib(p.peak_vram_bytes)} of ${gib(m.gpu_total_bytes)}`),
    h("div", { id: "plan-bar" }, stackedBar(m.gpu, m.gpu_total_bytes, marks)),
    legend(m.gpu),
    m.host.length ? [h("h3", {}, `host RAM pinned: ${gib(m.host_pinned_bytes)}` + (m.host_total_bytes > m.host_pinned_bytes ? ` of ${gib(m.host_total_bytes)} available` : "")),
      stackedBar(m.host, Math.max(m.host_total_bytes, 1)), legend(m.host)] : null,
    h("h3", {}, "figures (planner, derived from SGLang's source)"),
    table(["what", "value"], [
      ["KV pool", `${num(p.kv_pool_tokens)} tokens (${num(p.kv_bytes_per_token)} B/token, ${k.kv_dtype})`],
      ["context (SGLang)", num(p.context_len) + (p.yarn_factor ? ` (YaRN x${p.yarn_factor})` : "")],
      ["longest prompt", `< ${num(p.max_request_tokens)} tokens`],
      [`requests of ${num(k.context)} at once`, String(p.max_concurrent_requests)],
      ["free after start-up", gib(p.startup_free_bytes)],
      p.hybrid ? ["decode estimate, 1 stream", `${num(p.hybrid.decode_tok_s, 1)} tok/s at ${num(p.hybrid.decode_context_tokens)} tokens (fitted estimate, not a ceiling); ${p.hybrid.num_gpu_experts} of ${p.hybrid.num_experts} experts/layer on the GPU, ${p.hybrid.kt_method} on ${p.hybrid.cpuinfer_threads} CPU threads, host RAM ${gib(p.hybrid.host_ram_bytes)}`]
        : ["decode ceiling, 1 stream", p.decode_tok_s_ceiling ? num(p.decode_tok_s_ceiling, 1) + " tok/s (bandwidth bound)" : "n/a"],
      ["resolved knobs", Object.entries(k).filter(([, v]) => v !== null).map(([n, v]) => `${n} ${v}`).join(", ")],
    ]),
    p.alternatives.length ? [h("h3", {}, "what would fit instead (re-planned, best first)"),
      table(["change", "fits", "speed cost"], p.alternatives.map(a => [a.change, a.fits ? "yes" : "no", a.cost]))] : null,
    h("h3", {}, "the exact command"),
    h("pre", { id: "plan-command" }, p.command),
    h("pre", {}, p.vramkit_command),
  ];
  fill("plan-out", out);
}

// --- live card ------------------------------------------------------------------------------------
function renderLive(d) {
  const snap = d.snapshot;
  if (snap.status === "no_nvml" || snap.status === "no_gpu") {
    fill("live-out", h("p", { id: "live-status", class: "nogpu" }, d.status_line),
      h("p", { class: "dim" }, d.reason || ""), h("p", {}, d.todo || ""));
    return;
  }
  const th = d.thresholds_pct;
  const kids = [d.status_line ? h("p", { id: "live-status", class: "error" }, d.status_line)
    : h("p", { id: "live-status", class: "dim" }, `${snap.gpus.length} GPU(s), driver ${snap.driver_version || "n/a"}; ${d.in_use_means}`)];
  for (const g of snap.gpus) {
    if (g.error) { kids.push(h("div", { class: "gpu" }, h("b", {}, `GPU ${g.index}: `), h("span", { class: "error" }, g.error))); continue; }
    const pct = g.in_use_percent;
    const color = pct >= th[th.length - 1] ? "#b91c1c" : pct >= th[0] ? "#d97706" : "#2563eb";
    const seg = [{ key: "used", label: "in use", bytes: g.in_use_bytes }, { key: "free", label: "free", bytes: g.total_bytes - g.in_use_bytes }];
    COLORS.used = color;
    const hist = d.history.map(p => ({ x: p.time_s, y: p.gpus[String(g.index)] ? p.gpus[String(g.index)].in_use_percent : null }));
    const t0 = hist.length ? hist[hist.length - 1].x : 0;
    kids.push(h("div", { class: "gpu" },
      h("p", {}, h("b", {}, `GPU ${g.index}: ${g.name}`), " ",
        `${gib(g.in_use_bytes)} / ${gib(g.total_bytes)} (${num(pct, 1)} %), ${g.temperature_c ?? "n/a"} °C, util ${g.util_percent ?? "n/a"} %` +
        (g.power_w ? `, ${num(g.power_w, 0)} W` : "")),
      stackedBar(seg, g.total_bytes, th.map(t => ({ at: t / 100, label: t + "%" })).concat(
        (d.budgets || {})[String(g.index)] ? [{ at: d.budgets[String(g.index)].bytes / g.total_bytes, label: "plan", color: "#111827", inside: true }] : [])),
      (d.budgets || {})[String(g.index)] ? h("p", { class: "dim" }, `plan line: ${d.budgets[String(g.index)].service}'s vram-safe budget ` +
        `${gib(d.budgets[String(g.index)].bytes)} (in use before its start + planned peak x 1.05)`) : null,
      h("h3", {}, `history (last ${d.history.length} samples, % in use)`),
      lineChart([{ name: "in use", points: hist.map(p => ({ x: p.x - t0, y: p.y })) }],
        { y0: 0, y1: 100, height: 140, quietLines: true, hlines: th.map(t => ({ y: t, label: t + "%" })), xfmt: v => v.toFixed(0) + "s", xticks: [], xlabel: "time →", yfmt: v => v.toFixed(0) + "%" }),
      Array.isArray(g.processes) && g.processes.length ?
        table(["pid", "process", "memory"], g.processes.map(p => [String(p.pid), p.name || "n/a", gib(p.used_bytes)]), [2])
        : h("p", { class: "dim" }, Array.isArray(g.processes) ? "no processes on this GPU" : "processes: not available")));
  }
  fill("live-out", kids);
}
async function loadLive() {
  try { renderLive(await api("api/live")); done("live"); }
  catch (e) { fail("live", "live-out", e); }
}

// --- running server -------------------------------------------------------------------------------
function fmtVal(v, unit) {
  if (v === null || v === undefined) return "n/a";
  return unit === "bytes" ? gib(v) : num(v) + " " + unit;
}
function renderServer(d) {
  if (!d.running) {
    fill("server-out", h("p", { id: "server-status", class: "dim" }, d.note));
    return;
  }
  const r = d.record || {};
  const info = d.server_info || {};
  const mem = d.sglang_memory || {};
  const kids = [h("p", { id: "server-status" }, `SGLang ${info.version || ""} at ${d.url}: ` +
    (r.preset ? `preset ${r.preset}, ` : "") + `${r.model || info.model_path || ""}` + (r.started_at ? `, started ${r.started_at}` : ""))];
  if (d.plan_error) kids.push(h("p", { class: "error" }, "no prediction: " + d.plan_error));
  if (d.rows && d.rows.length) {
    kids.push(h("h3", {}, "predicted (vramkit planner) vs actual"));
    kids.push(table(["figure", "predicted", "actual", "diff", "actual from"], d.rows.map(row => [row.what,
      fmtVal(row.predicted, row.unit), fmtVal(row.actual, row.unit),
      row.diff_pct === null ? "" : (row.diff_pct > 0 ? "+" : "") + row.diff_pct.toFixed(2) + " %", row.actual_source]), [1, 2, 3]));
    const cmp = d.rows.filter(x => x.unit === "bytes" && x.predicted && x.actual);
    if (cmp.length) {
      const max = Math.max(...cmp.flatMap(x => [x.predicted, x.actual]));
      const W = 560, rowH = 30;
      const svg = s("svg", { width: W, height: cmp.length * rowH + 8, role: "img" });
      cmp.forEach((x, i) => {
        const y = i * rowH + 4, w = 340;
        svg.append(s("text", { x: 0, y: y + 12 }, x.what));
        svg.append(s("rect", { x: 200, y, width: x.predicted / max * w, height: 10, fill: "#93c5fd" }));
        svg.append(s("rect", { x: 200, y: y + 12, width: x.actual / max * w, height: 10, fill: "#1d4ed8" }));
      });
      kids.push(svg, h("div", { class: "dim" }, h("span", { class: "swatch", style: "background:#93c5fd" }), " predicted  ",
        h("span", { class: "swatch", style: "background:#1d4ed8" }), " actual"));
    }
  }
  const pool = mem.max_total_num_tokens ?? info.max_total_num_tokens;
  if (pool && mem.num_used_tokens !== undefined) {
    kids.push(h("h3", {}, `KV pool in use: ${num(mem.num_used_tokens)} of ${num(pool)} tokens`),
      stackedBar([{ key: "kv", label: "KV tokens in use", bytes: mem.num_used_tokens * GiB },
        { key: "free", label: "free", bytes: (pool - mem.num_used_tokens) * GiB }], pool * GiB, [], 900, 30,
        b => num(b / GiB) + " tokens"));
  }
  kids.push(h("h3", {}, "the server now (SGLang /v1/loads" + (Object.keys(d.sglang_metrics || {}).length ? ", /metrics" : "") + ")"));
  kids.push(table(["what", "value"], [
    ["KV tokens used / available", `${num(mem.num_used_tokens)} / ${num(mem.max_total_num_tokens ?? info.max_total_num_tokens)}`],
    ["requests running / waiting", `${num(mem.num_running_reqs)} / ${num(mem.num_waiting_reqs)}`],
    ["prefix cache hit rate", mem.cache_hit_rate === undefined ? "n/a" : num(100 * mem.cache_hit_rate, 1) + " %"],
    ["generation throughput", mem.gen_throughput === undefined ? "n/a" : num(mem.gen_throughput, 1) + " tok/s"],
    ["GPU memory of the server (" + ((d.nvml || {}).how || "NVML") + ")", gib((d.nvml || {}).bytes)],
    ["GPU in use, whole card (NVML)", gib((d.nvml || {}).gpu_in_use_bytes)],
    // SGLang's names for the knobs' server args come with the catalog (vramkit/core/plan/knobs.py)
    ["server args", (catalog ? catalog.knobs : []).filter(k => k.server_arg && info[k.server_arg] != null)
      .map(k => `${k.server_arg} ${info[k.server_arg]}`).join(", ")],
  ]));
  const sm = Object.entries(d.sglang_metrics || {});
  if (sm.length) kids.push(table(["SGLang /metrics", "value"], sm.map(([k, v]) => [k, num(v, Number.isInteger(v) ? 0 : 3)]), [1]));
  if (d.sglang_metrics_note) kids.push(h("p", { class: "dim" }, d.sglang_metrics_note));
  if (d.log_figures && d.log_figures.load_begin_avail) kids.push(h("p", { class: "dim" },
    `planned from the free memory SGLang saw at load (its log: ${d.log_figures.load_begin_avail} GiB) and its own server args`));
  kids.push(h("h3", {}, "the kit's state record"), h("pre", {}, JSON.stringify(r, null, 1)));
  fill("server-out", kids);
}
async function loadServer() {
  try { renderServer(await api("api/server")); done("server"); }
  catch (e) { fail("server", "server-out", e); }
}

// --- bench ---------------------------------------------------------------------------------------
function renderBench(d) {
  if (!d.runs.length) { fill("bench-out", h("p", { class: "dim" }, `no bench results under ${d.dirs.join(", ")}: run make bench`)); return; }
  const names = d.runs.map(r => r.label);
  const fmt = (v, u) => v === null || v === undefined ? "" : u === "s" ? num(v, 3) : u === "share" ? num(100 * v, 1) + " %" : num(v, u === "tok/s" || u === "req/s" ? 1 : 0);
  const kids = [
    h("h3", {}, "decode tok/s (all requests together) by concurrency"),
    lineChart(d.runs.map(r => ({ name: r.label, points: r.concurrency })), { xfmt: v => "x" + v, xlabel: "requests at once" }),
    seriesLegend(names),
    h("h3", {}, "time to first token by prompt length"),
    lineChart(d.runs.map(r => ({ name: r.label, points: r.context.map(p => ({ x: p.prompt_tokens, y: p.ttft_s })) })),
      { logx: true, xfmt: v => v >= 1024 ? Math.round(v / 1024) + "K" : v, yfmt: v => v.toFixed(1) + "s", xlabel: "prompt tokens" }),
    seriesLegend(names),
    h("h3", {}, "headline figures"),
    table(["figure", ...names], d.headlines.filter(hl => d.runs.some(r => r.headline[hl.key] != null))
      .map(hl => [hl.label + (hl.unit ? ` (${hl.unit})` : ""), ...d.runs.map(r => fmt(r.headline[hl.key], hl.unit))]),
      names.map((_, i) => i + 1)),
    h("p", { class: "dim" }, d.runs.map(r => `${r.label}: ${r.device || "?"}, ${r.date_utc || "?"} (${r.file})`).join(" · ")),
  ];
  fill("bench-out", kids);
}
async function loadBench() {
  try { renderBench(await api("api/bench")); done("bench"); }
  catch (e) { fail("bench", "bench-out", e); }
}

// --- start ----------------------------------------------------------------------------------------
async function main() {
  if (only) {
    document.body.classList.add("single");
    for (const el of document.querySelectorAll(".panel")) if (el.id !== "panel-" + only) el.hidden = true;
  }
  let meta = { mode: "live" };
  try { meta = await api("api/meta"); } catch (e) { fill("meta", h("span", { class: "error" }, String(e.message))); }
  if (meta.mode === "replay") {
    const b = document.getElementById("replay");
    b.hidden = false;
    const v = meta.versions || {};
    const about = [v.sglang_server ? `SGLang ${v.sglang_server}` : null, meta.driver ? `driver ${meta.driver}` : null,
      v.vramkit ? `vramkit ${v.vramkit}` : null].filter(Boolean).join(", ");
    b.textContent = `replay of a capture from ${meta.device}, ${meta.captured_at_utc}` + (about ? ` (${about})` : "");
    document.getElementById("meta").textContent = "replay: " + (meta.replay_dir || "");
  } else if (meta.host) {
    document.getElementById("meta").textContent = `live on ${meta.host}, vramkit ${meta.vramkit}`;
  }
  const want = p => !only || only === p;
  if (want("plan")) {
    try { catalog = await api("api/catalog"); setupForm(catalog, meta); loadPlan(); }
    catch (e) { fail("plan", "plan-out", e); }
  }
  if (want("live")) { loadLive(); if (meta.mode !== "replay") setInterval(loadLive, 2000); }
  if (want("server")) { loadServer(); if (meta.mode !== "replay") setInterval(loadServer, 10000); }
  if (want("bench")) loadBench();
}
main();
