// torchleak's live notebook view (anywidget). Plain ES module, no dependencies: the report
// arrives as the `report` trait (torchleak.report/1), progress as `progress`.

const NS = "http://www.w3.org/2000/svg";

// The one byte formatter of the front end, for numbers the JSON carries raw; it matches the
// core's formatBytes and torchleak.render.format.format_bytes (tests/python/test_render.py
// runs all three). Sentences the core knows arrive as text: site.text, projection_text,
// summary.headline, summary.empty_text.
export function formatBytes(n) {
  n = Number(n || 0);
  const sign = n < 0 ? "-" : "";
  n = Math.abs(n);
  const units = ["B", "KiB", "MiB", "GiB", "TiB"];
  let u = 0;
  while (n >= 1024 && u < units.length - 1) { n /= 1024; u += 1; }
  return sign + (u === 0 ? n.toFixed(0) : n.toFixed(1)) + " " + units[u];
}

function siteText(site) {
  return (site && site.text) || "<unknown>";
}

function el(tag, attrs = {}, text) {
  const node = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs)) node.setAttribute(k, v);
  if (text !== undefined) node.textContent = text;
  return node;
}

function svgEl(tag, attrs = {}) {
  const node = document.createElementNS(NS, tag);
  for (const [k, v] of Object.entries(attrs)) node.setAttribute(k, String(v));
  return node;
}

// Min/max per bucket keeps spikes when a long run is drawn in a few hundred pixels.
function downsample(values, buckets) {
  if (values.length <= buckets * 2) return values.map((v, i) => [i, v]);
  const out = [];
  const size = values.length / buckets;
  for (let b = 0; b < buckets; b++) {
    const from = Math.floor(b * size), to = Math.floor((b + 1) * size);
    let lo = from, hi = from;
    for (let i = from; i < to; i++) {
      if (values[i] < values[lo]) lo = i;
      if (values[i] > values[hi]) hi = i;
    }
    for (const i of lo < hi ? [lo, hi] : [hi, lo]) out.push([i, values[i]]);
  }
  return out;
}

function drawCurve(device, leakRate, iterations) {
  const width = 460, height = 150, pad = 34;
  const alloc = device.allocated || [];
  const reserved = device.reserved || [];
  const top = Math.max(1, ...alloc, ...reserved);
  const n = Math.max(alloc.length, 1);
  const x = (i) => pad + ((width - pad - 8) * i) / Math.max(n - 1, 1);
  const y = (v) => 8 + (height - 30) * (1 - v / top);
  const svg = svgEl("svg", { width, height, viewBox: `0 0 ${width} ${height}`, class: "tl-curve" });
  svg.appendChild(svgEl("line", { x1: pad, y1: y(0), x2: width - 8, y2: y(0), stroke: "#999" }));
  const label = svgEl("text", { x: 2, y: 14 });
  label.textContent = formatBytes(top);
  svg.appendChild(label);
  const axis = svgEl("text", { x: width - 70, y: height - 4 });
  axis.textContent = `iteration ${n}`;
  svg.appendChild(axis);
  const line = (values, cls) => {
    const pts = downsample(values, 200);
    const path = svgEl("polyline", { class: cls, points: pts.map(([i, v]) => `${x(i).toFixed(1)},${y(v).toFixed(1)}`).join(" ") });
    path.dataset.testid = cls === "alloc" ? "curve-allocated" : "curve-reserved";
    path.dataset.points = String(pts.length);
    return path;
  };
  if (reserved.length && reserved.some((v, i) => v !== alloc[i])) svg.appendChild(line(reserved, "reserved"));
  svg.appendChild(line(alloc, "alloc"));
  if (leakRate > 0 && alloc.length > 1) {
    const end = alloc[alloc.length - 1];
    const start = end - leakRate * (alloc.length - 1);
    svg.appendChild(svgEl("line", { class: "trend", x1: x(0), y1: y(Math.max(start, 0)), x2: x(n - 1), y2: y(end) }));
  }
  return svg;
}

function pathTree(finding) {
  const details = el("details", { class: "tl-path", "data-testid": "path-tree" });
  const summary = el("summary", {}, `held by ${finding.path_text || "?"}` +
    (finding.holder ? ` — holder ${finding.holder.path_text} (+${Number(finding.holder.growth_per_iteration).toPrecision(2)}/iteration)` : ""));
  details.appendChild(summary);
  for (const step of finding.path || []) {
    const row = el("div", { class: "tl-step", "data-testid": "path-step" });
    const t = step.tensor;
    const what = t ? `${t.dtype} [${(t.shape || []).join(", ")}] ${formatBytes(t.nbytes)}` +
      (t.site ? `, allocated at ${siteText(t.site)}` : "") : step.type || "";
    row.appendChild(el("b", {}, step.label));
    row.appendChild(document.createTextNode(` ${step.kind} ${what}`));
    if (step.note) row.appendChild(el("span", { class: "tl-note" }, ` (${step.note})`));
    details.appendChild(row);
  }
  if (finding.suggestion) details.appendChild(el("div", { class: "tl-step" }, `fix: ${finding.suggestion}`));
  return details;
}

// Scroll to the notebook cell a site points at (`In [n]`), found by its input prompt. Plain
// DOM, so it works in JupyterLab and Notebook 7 when the cell is rendered; elsewhere a no-op.
function revealCell(number) {
  const prompts = document.querySelectorAll(".jp-InputPrompt, .input_prompt");
  for (const prompt of prompts) {
    if (prompt.textContent.replace(/\s/g, "").startsWith(`[${number}]`)) {
      const cell = prompt.closest(".jp-Cell, .cell") || prompt;
      cell.scrollIntoView({ block: "center" });
      cell.dataset.torchleakHighlight = "true";
      cell.style.outline = "2px solid var(--jp-brand-color1, #1976d2)";
      setTimeout(() => { cell.style.outline = ""; delete cell.dataset.torchleakHighlight; }, 2500);
      return true;
    }
  }
  return false;
}

const COLUMNS = [
  ["verdict", (f) => f.verdict],
  ["site", (f) => siteText(f.site)],
  ["per iteration", (f) => f.bytes_per_iteration],
  ["live", (f) => f.total_bytes],
  ["holder", (f) => (f.holder ? f.holder.path_text : f.path_text || "")],
];

function render({ model, el: host }) {
  const root = el("div", { class: "tl-root", "data-testid": "torchleak-widget" });
  const style = document.createElement("style");
  style.textContent = __TORCHLEAK_CSS__;
  host.appendChild(style);
  host.appendChild(root);
  let sortBy = 3, descending = true;

  const draw = () => {
    const report = model.get("report") || {};
    const progress = model.get("progress") || {};
    root.replaceChildren();
    const findings = report.findings || [];
    const summary = report.summary || {};
    const head = el("div", { class: "tl-head" });
    head.appendChild(el("b", {}, "torchleak"));
    head.appendChild(document.createTextNode(`: ${summary.headline || ""} in ${report.iterations || 0} iteration(s)`));
    if (progress.n) {
      head.appendChild(el("span", { class: "tl-progress", "data-testid": "progress" },
        `iteration ${progress.k} of ${progress.n}, ${Number(progress.elapsed).toFixed(1)} s elapsed, ~${Number(progress.remaining).toFixed(1)} s left`));
    }
    root.appendChild(head);
    for (const cause of report.causes || []) {
      const line = el("div", { class: "tl-cause", "data-testid": "cause" });
      line.appendChild(el("b", { class: "tl-verdict-leak" }, "LEAK "));
      line.appendChild(document.createTextNode(`${cause.text} [${cause.severity}]`));
      if (cause.suggestion) line.appendChild(el("div", { class: "tl-note" }, `fix: ${cause.suggestion}`));
      root.appendChild(line);
    }
    for (const device of report.devices || []) {
      const box = el("div", { class: "tl-device", "data-testid": "growth-curve" });
      let text = `${device.device}: ${formatBytes((device.allocated || [0]).slice(-1)[0])} tracked live`;
      const rate = device.leak_bytes_per_iteration || 0;
      if (device.projection_text) text += ` — ${device.projection_text}`;
      if (device.verdict === "fragmentation") text += ` — fragmentation (${(device.fragmentation_ratio * 100).toFixed(0)}% reserved but unused)`;
      box.appendChild(el("div", {}, text));
      box.appendChild(drawCurve(device, rate, report.iterations || 0));
      root.appendChild(box);
    }
    const table = el("table", { class: "tl-table", "data-testid": "findings" });
    const header = el("tr");
    COLUMNS.forEach(([name], i) => {
      const th = el("th", { "data-testid": `sort-${i}` }, name + (i === sortBy ? (descending ? " ▾" : " ▴") : ""));
      th.addEventListener("click", () => { descending = sortBy === i ? !descending : true; sortBy = i; draw(); });
      header.appendChild(th);
    });
    table.appendChild(header);
    const key = COLUMNS[sortBy][1];
    const sorted = findings.slice().sort((a, b) => {
      const ka = key(a), kb = key(b);
      const c = typeof ka === "number" ? ka - kb : String(ka).localeCompare(String(kb));
      return descending ? -c : c;
    });
    for (const f of sorted) {
      const row = el("tr", { class: "tl-row", "data-testid": "finding-row" });
      row.appendChild(el("td", { class: `tl-verdict-${f.verdict}` }, f.verdict));
      const siteCell = el("td", {}, `${siteText(f.site)} ${f.site.function || ""}`);
      if (f.site && f.site.cell !== null && f.site.cell !== undefined) {
        const link = el("a", { href: "#", "data-testid": "site-link", title: "show the cell" }, siteText(f.site));
        link.addEventListener("click", (event) => {
          event.preventDefault();
          event.stopPropagation();
          revealCell(f.site.cell);
        });
        siteCell.replaceChildren(link, document.createTextNode(` ${f.site.function || ""}`));
      }
      row.appendChild(siteCell);
      row.appendChild(el("td", { class: "tl-num" }, formatBytes(f.bytes_per_iteration)));
      row.appendChild(el("td", { class: "tl-num" }, formatBytes(f.total_bytes)));
      row.appendChild(el("td", {}, f.holder ? f.holder.path_text : f.path_text || ""));
      table.appendChild(row);
      if ((f.path || []).length) {
        const detailRow = el("tr");
        const cell = el("td", { colspan: String(COLUMNS.length) });
        const tree = pathTree(f);
        cell.appendChild(tree);
        detailRow.appendChild(cell);
        table.appendChild(detailRow);
        row.addEventListener("click", () => { tree.open = !tree.open; if (tree.open) tree.scrollIntoView({ block: "nearest" }); });
      }
    }
    root.appendChild(table);
    if (summary.empty_text) root.appendChild(el("div", {}, summary.empty_text));
  };

  draw();
  model.on("change:report", draw);
  model.on("change:progress", draw);
  return () => {
    model.off("change:report", draw);
    model.off("change:progress", draw);
  };
}

export default { render };
