// flowkit report: draws the page from the JSON in #flowkit-data. Plain DOM, no library.
// Every piece of run data reaches the page as text (textContent, attributes); nothing from the
// data is ever parsed as markup, so a row holding HTML shows that HTML as text.
(function () {
  "use strict";

  const DATA = JSON.parse(document.getElementById("flowkit-data").textContent);
  const RUN = DATA.run;
  const SVGNS = "http://www.w3.org/2000/svg";

  // -- small helpers ------------------------------------------------------------------------
  function build(node, attrs, kids) {
    for (const [name, value] of Object.entries(attrs || {})) {
      if (value === null || value === undefined || value === false) continue;
      if (name.startsWith("on")) node.addEventListener(name.slice(2), value);
      else node.setAttribute(name, value === true ? "" : String(value));
    }
    for (const kid of kids) {
      if (kid === null || kid === undefined || kid === false) continue;
      node.append(kid instanceof Node ? kid : document.createTextNode(String(kid)));
    }
    return node;
  }
  const el = (tag, attrs, ...kids) => build(document.createElement(tag), attrs, kids);
  const svg = (tag, attrs, ...kids) => build(document.createElementNS(SVGNS, tag), attrs, kids);

  function fmtNum(v) {
    if (v === null || v === undefined) return "—";
    if (typeof v === "boolean") return String(v);
    if (typeof v !== "number") return String(v);
    if (Number.isInteger(v)) return String(v);
    const s = Number(v.toPrecision(4));
    return String(s);
  }
  function cellText(v) {
    if (v === null || v === undefined) return "—";
    return typeof v === "number" ? fmtNum(v) : String(v);
  }
  function plural(n, word) {
    return n.toLocaleString("en-US") + " " + word + (n === 1 ? "" : "s");
  }
  const pill = (text, cls) => el("span", { class: "pill " + (cls || text) }, text);
  const statusClass = (s) => String(s).split(" ")[0];

  // -- header -----------------------------------------------------------------------------------
  function header() {
    const c = RUN.counts || {};
    const failed = (c.failed || 0) + (c.bad_input || 0);
    const facts = [
      ["started", RUN.started],
      ["duration", RUN.duration],
      ["rows", (c.rows ?? DATA.limits.rows).toLocaleString("en-US")],
      ["ok", (c.succeeded ?? "—").toLocaleString("en-US")],
      ["failed", failed.toLocaleString("en-US")],
      ["invalid", (c.invalid ?? "—").toLocaleString("en-US")],
      ["cache hits", (c.cache_hits ?? "—").toLocaleString("en-US")],
      ["tokens", RUN.tokens],
      ["estimated cost", RUN.cost],
    ];
    document.title = RUN.name + " · flowkit report";
    const sub = el("div", { class: "sub" }, "flow ", el("b", null, RUN.flow));
    if (RUN.flow_path) sub.append(" · ", RUN.flow_path);
    if (RUN.data_path) sub.append(" · data ", RUN.data_path);
    return el(
      "header",
      { class: "top" },
      el("div", { class: "brand" }, "flowkit report"),
      el("h1", null, el("span", { id: "run-name" }, RUN.name), pill(RUN.status, statusClass(RUN.status))),
      sub,
      el(
        "div",
        { class: "facts" },
        ...facts.map(([k, v]) => {
          const tone =
            (k === "failed" && failed > 0 && "bad") || (k === "invalid" && c.invalid > 0 && "warn");
          return el(
            "div",
            { class: "fact" + (tone ? " " + tone : ""), "data-fact": k },
            el("div", { class: "k" }, k),
            el("div", { class: "v" }, v),
          );
        }),
      ),
    );
  }

  function jumpNav(sections) {
    return el("nav", { class: "jump" }, ...sections.map(([id, label]) => el("a", { href: "#" + id }, label)));
  }

  function section(id, title, note, ...kids) {
    return el(
      "section",
      { id: id },
      el("header", null, el("h2", null, title), note ? el("span", { class: "muted" }, note) : null),
      ...kids,
    );
  }

  function noteList(notes, info) {
    if (!notes || !notes.length) return null;
    return el("ul", { class: "notes" + (info ? " info" : "") }, ...notes.map((n) => el("li", null, n)));
  }

  // A run's notices read after its numbers, folded: they explain, they are not the result.
  function foldedNotes(notes) {
    if (!notes || !notes.length) return null;
    const label = notes.length + (notes.length === 1 ? " notice" : " notices");
    return el("details", { class: "notices", id: "notices" }, el("summary", null, label), noteList(notes));
  }

  // The small tables (comparison, errors, nodes) all take this one form: a plain table, a header
  // row whose cells are right-aligned where isRight(index) says (over the numeric columns), and
  // the rows the caller built. The rows table is not one of them: it sorts and redraws its head.
  function plainTable(id, headers, isRight, rows) {
    return el(
      "table",
      { class: "plain", id },
      el(
        "thead",
        null,
        el("tr", null, ...headers.map((h, i) => el("th", { class: isRight(i) ? "r" : null }, h))),
      ),
      el("tbody", null, ...rows),
    );
  }

  // -- metric cards -----------------------------------------------------------------------------
  const CHIP_KEYS = new Set(["pass_rate", "invalid"]);

  function metricCard(group) {
    const items = new Map(group.items.map((it) => [it.key, it]));
    const main = items.get(group.main);
    const card = el("div", { class: "card", "data-group": group.name });
    card.append(el("div", { class: "title" }, group.name));
    card.append(
      el(
        "div",
        { class: "main", "data-metric": main.metric },
        el("span", { class: "v num" }, main.text),
        el("span", { class: "k" }, main.key),
      ),
    );
    const rate = items.get("pass_rate") || (group.main === "defect_rate" ? main : null);
    if (rate && rate.value !== null) {
      const width = Math.max(0, Math.min(1, rate.value)) * 100;
      const meter = el("div", { class: "meter" + (rate.key === "defect_rate" ? " defect" : "") });
      meter.append(el("span", { style: "width:" + width.toFixed(1) + "%" }));
      meter.title = rate.key + " " + rate.text;
      card.append(meter);
    }
    const chips = el("div", { class: "chips" });
    for (const key of CHIP_KEYS) {
      const it = items.get(key);
      if (!it || key === group.main) continue;
      const warn = key === "invalid" && it.value > 0;
      chips.append(
        el(
          "span",
          { class: "chip" + (warn ? " warn" : ""), "data-metric": it.metric },
          key.replace("_", " ") + " ",
          el("b", { class: "num" }, it.text),
        ),
      );
    }
    if (group.failed !== null && group.failed !== undefined) {
      chips.append(
        el(
          "span",
          { class: "chip" + (group.failed > 0 ? " bad" : ""), "data-failed": group.name },
          "failed rows ",
          el("b", { class: "num" }, group.failed.toLocaleString("en-US")),
        ),
      );
    }
    if (chips.childNodes.length) card.append(chips);
    const rest = group.items.filter((it) => it.key !== group.main && !CHIP_KEYS.has(it.key));
    if (rest.length) {
      const dl = el("dl");
      for (const it of rest) {
        dl.append(el("dt", null, it.key), el("dd", { "data-metric": it.metric }, it.text));
      }
      card.append(dl);
    }
    return card;
  }

  function metricsSection() {
    const groups = DATA.metric_groups;
    const body = groups.length
      ? el("div", { class: "cards" }, ...groups.map(metricCard))
      : el("div", { class: "notice" }, "This run has no metrics (metrics.json is empty or missing).");
    return section(
      "metrics",
      "Metrics",
      "from metrics.json",
      body,
      foldedNotes([...RUN.notices, ...RUN.aggregates]),
    );
  }

  // -- histograms --------------------------------------------------------------------------------
  function histogramCard(h) {
    const W = 300,
      H = 130,
      L = 4,
      R = 4,
      T = 16,
      B = 22;
    const plotW = W - L - R,
      plotH = H - T - B;
    const bins = h.bins;
    const most = Math.max(1, ...bins.map((b) => b.count));
    const bw = plotW / bins.length;
    const gap = bins.length > 12 ? 1 : 4;
    const col = columnIndex("o." + h.name);
    const chart = svg("svg", {
      viewBox: `0 0 ${W} ${H}`,
      role: "img",
      "aria-label": "histogram of " + h.name,
    });
    chart.append(svg("line", { class: "axis", x1: L, x2: W - R, y1: T + plotH, y2: T + plotH }));
    bins.forEach((b, i) => {
      const bh = (b.count / most) * plotH;
      const x = L + i * bw + gap / 2;
      const range = b.label || fmtNum(b.lo) + " – " + fmtNum(b.hi);
      const tip = range + ": " + plural(b.count, "row") + (col >= 0 ? " (click to filter the rows)" : "");
      const pick = () => {
        if (col < 0) return;
        setRange({ col: col, name: h.name, lo: b.lo, hi: b.hi, closed: b.closed, label: range });
      };
      const bin = svg("g", { class: "bin", "data-bin": range, onclick: pick });
      bin.append(svg("title", null, tip));
      // A transparent full-height target, so an empty or short bin is still easy to hit.
      bin.append(svg("rect", { class: "hit", x: L + i * bw, y: T, width: bw, height: plotH }));
      bin.append(
        svg("rect", {
          class: "bar",
          x: x,
          y: T + plotH - bh,
          width: Math.max(1, bw - gap),
          height: Math.max(bh, b.count ? 1 : 0),
          rx: 2,
        }),
      );
      chart.append(bin);
      if (bins.length <= 12 && b.count) {
        chart.append(
          svg(
            "text",
            { class: "count", x: x + (bw - gap) / 2, y: T + plotH - bh - 3, "text-anchor": "middle" },
            b.count,
          ),
        );
      }
      if (b.label && (bins.length <= 16 || i % Math.ceil(bins.length / 8) === 0)) {
        chart.append(svg("text", { x: L + i * bw + bw / 2, y: H - 6, "text-anchor": "middle" }, b.label));
      }
    });
    if (!bins[0].label) {
      const first = bins[0].lo,
        last = bins[bins.length - 1].hi;
      chart.append(svg("text", { x: L, y: H - 6, "text-anchor": "start" }, fmtNum(first)));
      chart.append(svg("text", { x: W - R, y: H - 6, "text-anchor": "end" }, fmtNum(last)));
      chart.append(
        svg("text", { x: L + plotW / 2, y: H - 6, "text-anchor": "middle" }, fmtNum((first + last) / 2)),
      );
    }
    let mx;
    if (bins[0].label) mx = L + (h.mean - bins[0].lo + 0.5) * bw;
    else mx = L + ((h.mean - bins[0].lo) / (bins[bins.length - 1].hi - bins[0].lo || 1)) * plotW;
    // Under the count labels, which carry a halo, so a label over the line stays readable.
    chart.insertBefore(
      svg("line", { class: "mean", x1: mx, x2: mx, y1: T, y2: T + plotH }),
      chart.querySelector("text"),
    );
    const missing = DATA.limits.rows - h.n;
    return el(
      "div",
      { class: "panel hist", "data-hist": h.name },
      el("div", { class: "title" }, h.name),
      el(
        "div",
        { class: "stats" },
        `mean ${fmtNum(h.mean)} · min ${fmtNum(h.min)} · max ${fmtNum(h.max)} · ${plural(h.n, "row")}` +
          (missing > 0 ? ` · ${missing.toLocaleString("en-US")} without a number` : ""),
      ),
      chart,
    );
  }

  function histogramsSection() {
    if (!DATA.histograms.length) return null;
    return section(
      "distributions",
      "Score distributions",
      "every numeric per-row output, over all rows; click a bar to list its rows",
      el("div", { class: "hists" }, ...DATA.histograms.map(histogramCard)),
    );
  }

  // -- compare --------------------------------------------------------------------------------
  function ciPlot(m) {
    const [lo, mid, hi] = m.plot;
    const W = 150,
      H = 20,
      pad = 6;
    const cls = m.verdict === "better" ? "better" : m.verdict === "worse" ? "worse" : "";
    const box = el("div", { class: "ci " + cls });
    if (mid === null) return box;
    const reach = Math.max(Math.abs(lo ?? mid), Math.abs(hi ?? mid), Math.abs(mid)) * 1.1 || 1;
    const x = (v) => pad + ((v + reach) / (2 * reach)) * (W - 2 * pad);
    const g = svg("svg", { width: W, height: H, viewBox: `0 0 ${W} ${H}` });
    g.append(svg("line", { class: "zero", x1: x(0), x2: x(0), y1: 1, y2: H - 1 }));
    if (lo !== null && hi !== null)
      g.append(svg("line", { class: "range", x1: x(lo), x2: x(hi), y1: H / 2, y2: H / 2 }));
    g.append(svg("circle", { class: "dot", cx: x(mid), cy: H / 2, r: 4 }));
    box.append(g);
    return box;
  }

  function compareSection() {
    const C = DATA.compare;
    if (!C) return null;
    const verdictClass = { better: "better", worse: "worse", "too few rows": "too-few" };
    const by = C.key ? "key " + C.key : "line";
    const facts = [
      `A = this run, ${RUN.name} (${plural(C.rows_a, "row")}); B = ${C.b.name} (${C.b.flow}, ${plural(C.rows_b, "row")}, ${C.b.started}).`,
      `Δ is B − A over ${plural(C.paired, "paired row")} (paired by ${by}); ${C.confidence} interval by ${C.method}.`,
    ];
    if (C.only_a) facts.push(`${plural(C.only_a, "row")} only in A.`);
    if (C.only_b) facts.push(`${plural(C.only_b, "row")} only in B.`);
    const parts = [el("p", { class: "muted" }, facts.join(" ")), noteList(C.notes)];
    if (C.metrics.length) {
      const t = plainTable(
        "compare-metrics",
        ["output", "rows", "mean A", "mean B", "Δ (B − A)", C.confidence + " CI", "", "verdict"],
        (i) => i >= 1 && i <= 5,
        C.metrics.map((m) => {
          const rows = m.n.toLocaleString("en-US") + (m.missing ? ` (${m.missing} lack a value)` : "");
          return el(
            "tr",
            { "data-output": m.name },
            el(
              "td",
              null,
              m.name,
              m.lower_is_better ? el("span", { class: "muted" }, " (lower is better)") : null,
            ),
            el("td", { class: "r" }, rows),
            el("td", { class: "r" }, m.mean_a),
            el("td", { class: "r" }, m.mean_b),
            el("td", { class: "r delta" }, m.delta),
            el("td", { class: "r" }, m.ci),
            el("td", null, ciPlot(m)),
            el("td", null, pill(m.verdict, verdictClass[m.verdict] || "same")),
          );
        }),
      );
      parts.push(el("div", { class: "panel" }, t));
    }
    const side = el("div", { class: "grid2", style: "margin-top:14px" });
    if (C.changes.length) {
      const t = plainTable(
        "compare-changes",
        ["output", C.key || "row", "A", "B", "Δ"],
        (i) => i >= 2,
        C.changes.map((ch) => {
          const who = C.key ? `${ch.key} (row ${ch.line_a})` : "row " + ch.line_a;
          return el(
            "tr",
            { class: "link", title: "open row " + ch.line_a + "'s trace", onclick: () => openRow(ch.line_a) },
            el("td", null, ch.metric),
            el("td", null, who),
            el("td", { class: "r" }, ch.a),
            el("td", { class: "r" }, ch.b),
            el("td", { class: "r " + (ch.regression ? "delta-bad" : "delta-good") }, ch.delta),
          );
        }),
      );
      side.append(
        el("div", { class: "panel" }, el("h3", null, "Rows that changed most (regressions first)"), t),
      );
    }
    if (C.aggregates.length) {
      const t = plainTable(
        "compare-aggregates",
        ["metric", "A", "B", "Δ"],
        (i) => i >= 1,
        C.aggregates.map((g) =>
          el(
            "tr",
            null,
            el("td", null, g.name),
            el("td", { class: "r" }, g.a),
            el("td", { class: "r" }, g.b),
            el("td", { class: "r" }, g.delta),
          ),
        ),
      );
      side.append(el("div", { class: "panel" }, el("h3", null, "Metrics side by side"), t));
    }
    if (side.childNodes.length) parts.push(side);
    return section("compare", "Comparison", "with " + C.b.name, ...parts);
  }

  // -- errors and nodes --------------------------------------------------------------------------
  function errorsSection() {
    if (!DATA.errors.length) return null;
    const t = plainTable(
      "errors",
      ["node", "type", "count", "rows", "example"],
      () => false,
      DATA.errors.map((g) => {
        const lines = el("td");
        g.lines.forEach((line, i) => {
          if (i) lines.append(", ");
          lines.append(el("button", { class: "linklike", onclick: () => openRow(line) }, line));
        });
        if (g.count > g.lines.length) lines.append(", …");
        return el(
          "tr",
          null,
          el("td", { class: "mono" }, g.node),
          el("td", null, g.type),
          el("td", { class: "r" }, g.count),
          lines,
          el("td", { class: "delta-bad" }, g.example),
        );
      }),
    );
    return section("errors", "Errors", "grouped by node and type", el("div", { class: "panel" }, t));
  }

  function nodesSection() {
    const parts = [];
    if (DATA.slowest.length) {
      const t = plainTable(
        null,
        ["node", "kind", "runs", "total s", "mean s"],
        (i) => i >= 2,
        DATA.slowest.map((s) =>
          el(
            "tr",
            null,
            el("td", { class: "mono" }, s.node),
            el("td", null, s.kind),
            el("td", { class: "r" }, s.runs.toLocaleString("en-US")),
            el("td", { class: "r" }, s.total.toFixed(3)),
            el("td", { class: "r" }, s.mean.toFixed(4)),
          ),
        ),
      );
      parts.push(el("div", { class: "panel" }, el("h3", null, "Slowest nodes (cache hits left out)"), t));
    }
    if (RUN.tokens_by_node.length) {
      const n = (v) => el("td", { class: "r" }, Number(v).toLocaleString("en-US"));
      const t = plainTable(
        null,
        ["node", "model", "calls", "prompt", "completion", "≈ USD"],
        (i) => i >= 2,
        RUN.tokens_by_node.map((u) =>
          el(
            "tr",
            null,
            el("td", { class: "mono" }, u.node),
            el("td", null, u.model || "—"),
            n(u.calls),
            n(u.prompt),
            n(u.completion),
            el("td", { class: "r" }, u.usd === null ? "—" : u.usd.toFixed(4)),
          ),
        ),
      );
      parts.push(el("div", { class: "panel" }, el("h3", null, "Tokens by node"), t));
    }
    if (!parts.length) return null;
    return section("nodes", "Nodes", null, el("div", { class: "grid2" }, ...parts));
  }

  // -- the rows table ---------------------------------------------------------------------------
  const TABLE = DATA.table;
  const COLUMNS = [
    { id: "line", label: "row", get: (r) => r.line, numeric: true },
    { id: "status", label: "status", get: (r) => r.status },
    ...TABLE.columns.map((c, i) => ({
      id: c.id,
      label: c.label,
      group: c.group,
      get: (r) => r.cells[i],
      cell: i,
    })),
    { id: "seconds", label: "time s", get: (r) => r.seconds, numeric: true, fixed: 3 },
    { id: "error", label: "error", get: (r) => r.error },
  ];
  const state = {
    sort: "line",
    dir: 1,
    text: "",
    show: "all",
    range: null,
    page: 0,
    size: 100,
    visible: [],
    current: null,
  };

  function columnIndex(id) {
    return TABLE.columns.findIndex((c) => c.id === id);
  }

  function haystack(row) {
    if (row._hay === undefined) {
      row._hay = [row.line, row.status, row.error || "", ...row.cells.map(cellText)]
        .join("\u0001")
        .toLowerCase();
    }
    return row._hay;
  }

  function inRange(v, r) {
    if (typeof v === "boolean") v = v ? 1 : 0;
    if (typeof v !== "number") return false;
    return v >= r.lo && (v < r.hi || (r.closed && v <= r.hi));
  }

  function compareValues(a, b) {
    const na = a === null || a === undefined,
      nb = b === null || b === undefined;
    if (na || nb) return na === nb ? 0 : na ? 1 : -1;
    if (typeof a === "boolean") a = a ? 1 : 0;
    if (typeof b === "boolean") b = b ? 1 : 0;
    if (typeof a === "number" && typeof b === "number") return a - b;
    if (typeof a === "number") return -1;
    if (typeof b === "number") return 1;
    return String(a).localeCompare(String(b), undefined, { numeric: true, sensitivity: "base" });
  }

  function applyView() {
    const words = state.text.trim().toLowerCase().split(/\s+/).filter(Boolean);
    const col = COLUMNS.find((c) => c.id === state.sort) || COLUMNS[0];
    const rows = TABLE.rows.filter((r) => {
      if (state.show === "failed" && r.status === "ok") return false;
      if (state.show === "ok" && r.status !== "ok") return false;
      if (state.show === "invalid" && !r.invalid) return false;
      if (state.range && !inRange(r.cells[state.range.col], state.range)) return false;
      return words.every((w) => haystack(r).includes(w));
    });
    rows.sort((a, b) => {
      const va = col.get(a),
        vb = col.get(b);
      const nulls = (va === null || va === undefined) - (vb === null || vb === undefined);
      if (nulls) return nulls; // rows without a value stay last either way
      return compareValues(va, vb) * state.dir || a.line - b.line;
    });
    state.visible = rows;
    const pages = Math.max(1, Math.ceil(rows.length / state.size));
    state.page = Math.min(state.page, pages - 1);
    drawHead();
    drawBody();
  }

  let thead, tbody, pagerInfo, prevBtn, nextBtn, chipBox, searchBox, showSelect;

  function drawHead() {
    const tr = el("tr");
    for (const c of COLUMNS) {
      const active = state.sort === c.id;
      const sortName = active ? (state.dir > 0 ? "ascending" : "descending") : "none";
      const btn = el(
        "button",
        { type: "button", title: "sort by " + c.label, onclick: () => sortBy(c.id) },
        c.group ? el("span", { class: "group" }, c.group) : el("span", { class: "group" }, "\u00a0"),
        c.label,
        active ? el("span", { class: "arrow" }, state.dir > 0 ? "▲" : "▼") : null,
      );
      tr.append(el("th", { "data-col": c.id, "aria-sort": sortName }, btn));
    }
    thead.replaceChildren(tr);
  }

  function cellNode(c, row) {
    const v = c.get(row);
    if (c.id === "status") {
      const td = el("td", null, pill(row.status));
      if (row.invalid) td.append(" ", pill("invalid"));
      return td;
    }
    if (c.id === "error") return el("td", { class: v ? "err" : "nil", title: v || null }, v || "");
    if (v === null || v === undefined) return el("td", { class: "nil" + (c.numeric ? " n" : "") }, "—");
    if (typeof v === "string" && /(^|\.)result$/.test(c.label) && ["pass", "fail", "invalid"].includes(v)) {
      return el("td", null, pill(v));
    }
    const text = c.fixed && typeof v === "number" ? v.toFixed(c.fixed) : cellText(v);
    return el(
      "td",
      { class: typeof v === "number" ? "n" : null, title: text.length > 30 ? text : null },
      text,
    );
  }

  function drawBody() {
    const start = state.page * state.size;
    const slice = state.visible.slice(start, start + state.size);
    const frag = document.createDocumentFragment();
    for (const row of slice) {
      const cls = [
        row.status !== "ok" ? "failed" : row.invalid ? "invalid" : "",
        state.current === row.line ? "current" : "",
      ]
        .join(" ")
        .trim();
      const tr = el("tr", {
        class: cls || null,
        tabindex: 0,
        "data-line": row.line,
        onclick: () => openRow(row.line),
      });
      tr.addEventListener("keydown", (e) => {
        if (e.key === "Enter") openRow(row.line);
      });
      for (const c of COLUMNS) tr.append(cellNode(c, row));
      frag.append(tr);
    }
    if (!slice.length) {
      frag.append(
        el("tr", null, el("td", { colspan: COLUMNS.length, class: "empty" }, "No row matches the filters.")),
      );
    }
    tbody.replaceChildren(frag);
    const total = state.visible.length;
    const shown = total
      ? `${(start + 1).toLocaleString("en-US")}–${Math.min(start + state.size, total).toLocaleString("en-US")} of `
      : "";
    const filtered =
      total !== TABLE.rows.length ? ` (filtered from ${TABLE.rows.length.toLocaleString("en-US")})` : "";
    pagerInfo.textContent = "showing " + shown + plural(total, "row") + filtered;
    prevBtn.disabled = state.page === 0;
    nextBtn.disabled = start + state.size >= total;
  }

  function sortBy(id) {
    if (state.sort === id) state.dir = -state.dir;
    else {
      state.sort = id;
      state.dir = 1;
    }
    applyView();
  }

  function setRange(range) {
    state.range = range;
    state.page = 0;
    chipBox.replaceChildren(
      el(
        "span",
        { class: "filter-chip", id: "range-filter" },
        range.name + " in " + range.label,
        el(
          "button",
          { type: "button", title: "clear this filter", "aria-label": "clear", onclick: () => clearRange() },
          "×",
        ),
      ),
    );
    applyView();
    document.getElementById("rows").scrollIntoView({ behavior: "smooth", block: "start" });
  }

  function clearRange() {
    state.range = null;
    chipBox.replaceChildren();
    applyView();
  }

  function rowsSection() {
    const L = DATA.limits;
    searchBox = el("input", {
      type: "search",
      id: "row-filter",
      placeholder: "Filter rows: any text in a cell, e.g. an id or a word of the answer",
      "aria-label": "filter rows",
    });
    let timer = null;
    searchBox.addEventListener("input", () => {
      clearTimeout(timer);
      timer = setTimeout(() => {
        state.text = searchBox.value;
        state.page = 0;
        applyView();
      }, 120);
    });
    showSelect = el(
      "select",
      { id: "row-status", "aria-label": "which rows" },
      el("option", { value: "all" }, "all rows"),
      el("option", { value: "failed" }, "failed only"),
      el("option", { value: "invalid" }, "invalid scores only"),
      el("option", { value: "ok" }, "ok only"),
    );
    showSelect.addEventListener("change", () => {
      state.show = showSelect.value;
      state.page = 0;
      applyView();
    });
    chipBox = el("span");
    const size = el(
      "select",
      { "aria-label": "rows per page" },
      ...[50, 100, 250, 1000].map((n) =>
        el("option", { value: n, selected: n === state.size }, n + " per page"),
      ),
    );
    size.addEventListener("change", () => {
      state.size = Number(size.value);
      state.page = 0;
      drawBody();
    });
    prevBtn = el(
      "button",
      {
        class: "btn",
        type: "button",
        onclick: () => {
          state.page--;
          drawBody();
        },
      },
      "‹ previous",
    );
    nextBtn = el(
      "button",
      {
        class: "btn",
        type: "button",
        onclick: () => {
          state.page++;
          drawBody();
        },
      },
      "next ›",
    );
    pagerInfo = el("span", { id: "row-count" });
    thead = el("thead");
    tbody = el("tbody");
    const notes = [];
    if (L.rows_in_table < L.rows) {
      notes.push(
        `The table holds ${L.rows_in_table.toLocaleString("en-US")} of the run's ${L.rows.toLocaleString("en-US")} rows (the first ${L.max_rows.toLocaleString("en-US")}, then failed rows); metrics and charts cover them all.`,
      );
    }
    if (L.rows_traced < L.rows_in_table) {
      notes.push(
        `Node traces are embedded for ${L.rows_traced.toLocaleString("en-US")} rows (failed rows first); for another row use flowkit trace ${RUN.id} --row N.`,
      );
    }
    return section(
      "rows",
      "Rows",
      "click a row for its node trace; click a column to sort",
      noteList(notes, true),
      el(
        "div",
        { class: "panel" },
        el("div", { class: "toolbar" }, searchBox, el("label", null, "show", showSelect), chipBox),
        el("div", { class: "table-wrap" }, el("table", { class: "rows", id: "rows-table" }, thead, tbody)),
        el("div", { class: "pager" }, pagerInfo, el("div", { class: "buttons" }, size, prevBtn, nextBtn)),
      ),
    );
  }

  // -- the trace drawer -------------------------------------------------------------------------
  let drawer, backdrop, drawerTitle, drawerBody;

  function valueBlock(text) {
    if (text === null || text === undefined) return el("pre", { class: "val nil" }, "null");
    return el("pre", { class: "val" }, text);
  }

  function kvBlock(pairs) {
    const box = el("div", { class: "kv" });
    for (const [k, v] of pairs) box.append(el("div", { class: "k" }, k), valueBlock(v));
    return box;
  }

  function field(label, ...kids) {
    return el("div", { class: "field" }, el("div", { class: "label" }, label), ...kids);
  }

  function nodeBlock(n, open) {
    const summary = el(
      "summary",
      null,
      el("span", { class: "name" }, n.node),
      pill(n.kind, "kind"),
      pill(n.status),
      n.cache_hit ? pill("cache hit", "cache") : null,
      n.status === "skipped" || n.status === "upstream_failed" || n.duration === null
        ? null
        : el("span", { class: "dur num" }, n.duration.toFixed(3) + " s"),
    );
    const body = el("div", { class: "node-body" });
    if (n.status === "upstream_failed") {
      body.append(el("div", { class: "meta" }, (n.error && n.error.message) || "an upstream node failed"));
    } else if (n.status === "skipped") {
      body.append(el("div", { class: "meta" }, "skipped: its when: condition was false"));
    } else {
      if (n.inputs.length) body.append(field("inputs", kvBlock(n.inputs)));
      if (n.llm) {
        const msgs = n.llm.messages.map(([role, text]) =>
          el("div", { class: "msg" }, el("span", { class: "role" }, role), valueBlock(text)),
        );
        body.append(field("prompt · " + (n.llm.model || "?"), ...msgs));
        if (n.llm.raw !== null) body.append(field("raw response", valueBlock(n.llm.raw)));
      }
      if (n.has_output) body.append(field(n.llm ? "response" : "output", valueBlock(n.output)));
      if (n.llm) {
        const u = n.llm.usage;
        body.append(
          el(
            "div",
            { class: "meta" },
            `tokens: ${u.prompt_tokens} prompt + ${u.completion_tokens} completion = ${u.total_tokens} · finish ${n.llm.finish_reason || "—"} · attempts ${n.llm.attempts}`,
          ),
        );
      }
      if (n.error) {
        body.append(
          el(
            "div",
            { class: "errbox", style: "margin:10px 0 0" },
            el("span", { class: "t" }, n.error.type + ": "),
            n.error.message,
          ),
        );
        if (n.error.traceback)
          body.append(
            el("details", { class: "tb" }, el("summary", null, "traceback"), valueBlock(n.error.traceback)),
          );
      }
    }
    const children = el("div", { class: "children" });
    body.append(children);
    const box = el("details", { class: "node " + n.status, "data-node": n.node, open: open }, summary, body);
    return { box, children };
  }

  function traceView(line) {
    const T = DATA.traces[String(line)];
    const row = TABLE.rows.find((r) => r.line === line);
    const parts = [];
    if (!T) {
      parts.push(
        el(
          "div",
          { class: "notice", id: "trace-missing" },
          `This row's node trace is not embedded in this report (it embeds traces for ${plural(DATA.limits.rows_traced, "row")}). In a terminal: `,
          el("code", null, `flowkit trace ${RUN.id} --row ${line}`),
        ),
      );
      if (row && row.error) parts.unshift(el("div", { class: "errbox" }, row.error));
      return parts;
    }
    if (T.error) {
      const where = T.error.node ? "node " + T.error.node + ": " : "";
      parts.push(
        el(
          "div",
          { class: "errbox", id: "row-error" },
          el("span", { class: "t" }, where + T.error.type + ": "),
          T.error.message,
        ),
      );
    }
    if (T.outputs.length)
      parts.push(el("div", { class: "block" }, el("h3", null, "Row outputs"), kvBlock(T.outputs)));
    if (T.inputs.length)
      parts.push(el("div", { class: "block" }, el("h3", null, "Row inputs"), kvBlock(T.inputs)));
    if (T.nodes.length) {
      const root = el("div", { id: "trace-tree" });
      const slots = new Map();
      const openAll = T.nodes.length <= 12;
      for (const n of T.nodes) {
        const { box, children } = nodeBlock(n, openAll || n.status === "failed" || !!n.llm);
        slots.set(n.node, children);
        (n.parent && slots.has(n.parent) ? slots.get(n.parent) : root).append(box);
      }
      const setAll = (open) => root.querySelectorAll("details.node").forEach((d) => (d.open = open));
      parts.push(
        el(
          "div",
          { class: "block" },
          el("h3", null, "Nodes, in execution order"),
          el(
            "div",
            { class: "tree-tools" },
            el("button", { class: "btn", type: "button", onclick: () => setAll(true) }, "expand all"),
            el("button", { class: "btn", type: "button", onclick: () => setAll(false) }, "collapse all"),
          ),
          root,
        ),
      );
    } else if (line >= 0) {
      parts.push(
        el("div", { class: "notice" }, "No node ran for this row (bad input rows never reach the flow)."),
      );
    }
    return parts;
  }

  function openRow(line) {
    state.current = line;
    const T = DATA.traces[String(line)];
    const row = TABLE.rows.find((r) => r.line === line);
    const status = (row && row.status) || (T && T.status) || "?";
    drawerTitle.replaceChildren(line < 0 ? "Aggregates" : "Row " + line, pill(status));
    if (row && row.invalid) drawerTitle.append(pill("invalid"));
    drawerBody.replaceChildren(...traceView(line));
    drawerBody.scrollTop = 0;
    drawer.hidden = false;
    backdrop.hidden = false;
    document.body.classList.add("drawer-open");
    drawer.setAttribute("data-line", line);
    try {
      history.replaceState(null, "", "#row=" + line);
    } catch (e) {
      /* some browsers refuse history on file:// pages; the link is a convenience only */
    }
    drawBody();
    drawer.querySelector(".close").focus();
  }

  function step(by) {
    const lines = state.visible.map((r) => r.line);
    const at = lines.indexOf(state.current);
    const next = lines[at + by];
    if (at >= 0 && next !== undefined) openRow(next);
  }

  function closeDrawer() {
    drawer.hidden = true;
    backdrop.hidden = true;
    document.body.classList.remove("drawer-open");
    try {
      history.replaceState(null, "", "#rows");
    } catch (e) {
      /* as above */
    }
    const tr = tbody.querySelector(`tr[data-line="${state.current}"]`);
    if (tr) tr.focus();
  }

  function drawerNodes() {
    drawerTitle = el("h2", { id: "trace-title" });
    drawerBody = el("div", { class: "body", id: "trace-body" });
    drawer = el(
      "aside",
      {
        class: "drawer",
        id: "trace",
        hidden: true,
        role: "dialog",
        "aria-modal": "true",
        "aria-labelledby": "trace-title",
      },
      el(
        "header",
        null,
        drawerTitle,
        el(
          "button",
          { class: "btn", type: "button", title: "previous row in the table (k)", onclick: () => step(-1) },
          "‹",
        ),
        el(
          "button",
          { class: "btn", type: "button", title: "next row in the table (j)", onclick: () => step(1) },
          "›",
        ),
        el(
          "button",
          { class: "btn close", type: "button", title: "close (Esc)", onclick: closeDrawer },
          "close",
        ),
      ),
      drawerBody,
    );
    backdrop = el("div", { class: "backdrop", hidden: true, onclick: closeDrawer });
    document.addEventListener("keydown", (e) => {
      if (drawer.hidden) return;
      if (e.key === "Escape") closeDrawer();
      else if (e.key === "j" && !e.target.closest("input")) step(1);
      else if (e.key === "k" && !e.target.closest("input")) step(-1);
    });
    return [backdrop, drawer];
  }

  // -- judge vs people (labels in RUN/labels.jsonl) ------------------------------------------
  function interval(ci) {
    return ci ? "[" + fmtNum(ci[0]) + ", " + fmtNum(ci[1]) + "]" : "";
  }

  function heatMap(confusion) {
    const most = Math.max(1, ...confusion.matrix.flat());
    const head = el("tr", null, el("th", null, "people ↓ judge →"), ...confusion.levels.map((l) => el("th", { class: "r" }, fmtNum(l))));
    const rows = confusion.matrix.map((counts, i) =>
      el(
        "tr",
        null,
        el("th", null, fmtNum(confusion.levels[i])),
        ...counts.map((n, j) =>
          el(
            "td",
            {
              class: "r heat" + (i === j ? " diagonal" : ""),
              style: `background: rgba(37, 99, 235, ${(0.08 + 0.8 * (n / most)).toFixed(3)}); color: ${n / most > 0.55 ? "#fff" : "inherit"}`,
              title: `people ${fmtNum(confusion.levels[i])}, judge ${fmtNum(confusion.levels[j])}: ${n} rows`,
            },
            String(n),
          ),
        ),
      ),
    );
    return el("table", { class: "plain heatmap" }, el("thead", null, head), el("tbody", null, ...rows));
  }

  function judgeSection() {
    const J = DATA.judge_vs_people;
    if (!J || !Object.keys(J.outputs).length) return null;
    const names = {
      accuracy: "exact agreement", kappa: "Cohen's κ", tpr: "true-positive rate", tnr: "true-negative rate",
      weighted_kappa: "quadratic weighted κ", spearman: "Spearman", kendall: "Kendall τ-b",
      mae: "mean absolute error", alpha: "Krippendorff's α (people)",
    };
    const parts = [];
    for (const [name, F] of Object.entries(J.outputs)) {
      if (!F.n) continue;
      const figures = Object.keys(names).filter((k) => k in F).map((k) =>
        el("tr", null, el("td", null, names[k]), el("td", { class: "r" }, fmtNum(F[k])), el("td", null, interval(F[k + "_ci"]))));
      const estimates = [
        ["judge only", F.judge_mean, F.judge_ci],
        ["labels only", F.human_mean, F.human_ci],
        ["corrected (PPI++)", F.corrected_mean, F.ci],
      ].map(([k, v, ci]) => el("tr", { "data-estimate": k }, el("td", null, k), el("td", { class: "r" }, fmtNum(v)), el("td", null, interval(ci))));
      const probe = F.length_bias
        ? el("p", { class: F.length_bias.flagged ? "bad" : "muted", "data-probe": "length" },
            `Length bias: the judge's score moves ${fmtNum(F.length_bias.per_100_tokens)} per 100 answer tokens at equal human label ${interval(F.length_bias.ci)}` +
            (F.length_bias.flagged ? " — the interval excludes 0: the judge rewards length." : " — no length bias shown."))
        : null;
      const disagree = (F.disagree || []).map((d) =>
        el("tr", null,
          el("td", null, el("a", { href: "#row=" + d.line, onclick: (e) => { e.preventDefault(); openRow(d.line); } }, "row " + d.line)),
          el("td", { class: "r" }, fmtNum(d.people)), el("td", { class: "r" }, fmtNum(d.judge)), el("td", null, d.answer)));
      parts.push(
        el("h3", null, `${name} (${F.scale}, ${plural(F.n, "labelled row")}, metric ${F.metric})`),
        el("div", { class: "grid2" },
          el("div", { class: "panel" }, plainTable(null, ["agreement", "value", "95% interval"], (i) => i === 1, figures)),
          el("div", { class: "panel" }, plainTable(null, [F.scale === "pass/fail" ? "pass rate" : "mean", "value", "95% interval"], (i) => i === 1, estimates))),
        F.confusion ? el("div", { class: "panel" }, heatMap(F.confusion)) : null,
        probe,
        disagree.length
          ? el("div", { class: "panel" }, plainTable(null, ["most disagreeing rows", "people", "judge", "answer"], (i) => i === 1 || i === 2, disagree))
          : null,
      );
    }
    const note = J.unmatched.length ? [`${plural(J.unmatched.length, "label")} match no row of this run.`] : null;
    return section("judge-vs-people", "Judge vs people", "from RUN/labels.jsonl", noteList(note), ...parts);
  }

  // -- footer and start --------------------------------------------------------------------------
  function footer() {
    const L = DATA.limits;
    const agg = DATA.traces["-1"]
      ? el(
          "button",
          { class: "linklike", type: "button", onclick: () => openRow(-1) },
          "the aggregate nodes' trace",
        )
      : null;
    return el(
      "footer",
      { class: "foot" },
      el(
        "p",
        null,
        `Generated ${DATA.generated} by flowkit ${DATA.flowkit_version} from ${RUN.dir}. The file is self-contained: it loads nothing.`,
      ),
      el(
        "p",
        null,
        `Caps: the table holds up to ${L.max_rows.toLocaleString("en-US")} rows (plus failed rows past them), node traces are embedded for up to ${L.max_trace_rows.toLocaleString("en-US")} rows (${L.rows_traced.toLocaleString("en-US")} here), texts in traces are cut at ${L.max_chars.toLocaleString("en-US")} characters and table cells at ${L.cell_chars}.`,
      ),
      agg ? el("p", null, "See also ", agg, ".") : null,
    );
  }

  function start() {
    const app = document.getElementById("app");
    const sections = [
      metricsSection(),
      compareSection(),
      judgeSection(),
      histogramsSection(),
      errorsSection(),
      rowsSection(),
      nodesSection(),
    ].filter(Boolean);
    const nav = jumpNav(sections.map((s) => [s.id, s.querySelector("h2").textContent]));
    app.append(header(), nav, el("main", null, ...sections), footer(), ...drawerNodes());
    applyView();
    const m = /^#row=(-?\d+)$/.exec(location.hash);
    if (m) openRow(Number(m[1]));
  }

  start();
})();
