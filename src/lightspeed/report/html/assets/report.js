// lightspeed's HTML report: unpacks the embedded plotly, draws every chart the page
// lists, and makes tables sortable and filterable. Nothing here reaches the network.
"use strict";

async function lsUnpackPlotly() {
  const packed = document.getElementById("ls-plotly").textContent.trim();
  const bytes = Uint8Array.from(atob(packed), (c) => c.charCodeAt(0));
  const stream = new Blob([bytes]).stream().pipeThrough(new DecompressionStream("gzip"));
  const source = await new Response(stream).text();
  const script = document.createElement("script");
  script.textContent = source;
  document.head.appendChild(script);
}

function lsFigures() {
  return JSON.parse(document.getElementById("ls-figures").textContent);
}

async function lsDraw() {
  const figures = lsFigures();
  const config = { displaylogo: false, responsive: true };
  for (const [id, figure] of Object.entries(figures)) {
    const div = document.getElementById(id);
    await Plotly.newPlot(div, figure.data, figure.layout, Object.assign({}, config, figure.config || {}));
  }
  for (const select of document.querySelectorAll("select.ls-module-filter")) {
    lsModuleFilter(select);
  }
}

// Keeps the points of a roofline chart whose module lies under the chosen one.
function lsModuleFilter(select) {
  const div = document.getElementById(select.dataset.chart);
  const full = div.data.map((t) => ({ x: t.x, y: t.y, customdata: t.customdata, size: t.marker && t.marker.size }));
  select.addEventListener("change", () => {
    const prefix = select.value;
    const update = { x: [], y: [], customdata: [], "marker.size": [] };
    const indices = [];
    full.forEach((t, i) => {
      if (!t.customdata) return;
      const keep = t.customdata.map((c) => prefix === "*" || c[1] === prefix || c[1].startsWith(prefix + "."));
      const pick = (a) => (Array.isArray(a) ? a.filter((_, j) => keep[j]) : a);
      update.x.push(pick(t.x));
      update.y.push(pick(t.y));
      update.customdata.push(pick(t.customdata));
      update["marker.size"].push(pick(t.size));
      indices.push(i);
    });
    Plotly.restyle(div, update, indices);
  });
}

function lsSortable(table) {
  table.querySelectorAll("th").forEach((th, column) => {
    th.addEventListener("click", () => {
      const body = table.tBodies[0];
      const numeric = th.classList.contains("num");
      const descending = th.dataset.order !== "desc";
      table.querySelectorAll("th").forEach((h) => delete h.dataset.order);
      th.dataset.order = descending ? "desc" : "asc";
      const key = (row) => {
        const td = row.cells[column];
        if (numeric) return td === undefined || td.dataset.v === undefined ? -Infinity : Number(td.dataset.v);
        return td === undefined ? "" : td.textContent;
      };
      const rows = Array.from(body.rows);
      rows.sort((a, b) => {
        const ka = key(a), kb = key(b);
        const order = numeric ? ka - kb : String(ka).localeCompare(String(kb));
        return descending ? -order : order;
      });
      rows.forEach((r) => body.appendChild(r));
    });
  });
}

function lsFilterable(input) {
  const table = document.getElementById(input.dataset.table);
  input.addEventListener("input", () => {
    const words = input.value.toLowerCase().split(/\s+/).filter(Boolean);
    for (const row of table.tBodies[0].rows) {
      const content = row.textContent.toLowerCase();
      row.hidden = !words.every((w) => content.includes(w));
    }
  });
}

window.addEventListener("DOMContentLoaded", async () => {
  document.querySelectorAll("table.sortable").forEach(lsSortable);
  document.querySelectorAll("input.ls-filter").forEach(lsFilterable);
  try {
    await lsUnpackPlotly();
    await lsDraw();
    document.body.dataset.drawn = "yes";
  } catch (error) {
    document.body.dataset.drawn = "failed";
    const note = document.getElementById("ls-chart-error");
    note.hidden = false;
    note.textContent = "The charts could not be drawn in this browser: " + error;
    throw error;
  }
});
