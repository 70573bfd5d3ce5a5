// The figures, drawn with Plotly.js in the app's manner: heatmaps of attention with the words on the axes.

const Plotly = () => window.Plotly;
const SCALE = "Blues";
const KIND_TITLE = { enc: "encoder self-attention", self: "decoder self-attention", cross: "cross-attention" };
export const KINDS = Object.keys(KIND_TITLE);

/** (queries, keys) labels of one kind, from the run's source tokens and decoder input tokens. */
export function axesOf(run, kind) {
  if (kind === "enc") return [run.srcTokens, run.srcTokens];
  return [run.decoderInput, kind === "self" ? run.decoderInput : run.srcTokens];
}

function heat(z, xs, ys, axis, zmax = 1) {
  return {
    type: "heatmap", z, x: xs.map((_, i) => i), y: ys.map((_, i) => i), zmin: 0, zmax, colorscale: SCALE,
    reversescale: true, showscale: false, xaxis: "x" + axis, yaxis: "y" + axis,
    customdata: ys.map((q) => xs.map((k) => [q, k])),
    hovertemplate: "%{customdata[0]} → %{customdata[1]}: %{z:.3f}<extra></extra>",
  };
}

/** Tick labels that fit ``px`` pixels of axis: every k-th, about one per font height (Plotly laying out
 * hundreds of labels on a long input froze the page). The hover still names every token (customdata). */
export function ticks(labels, px, size = 11) {
  const fit = Math.max(1, Math.floor(px / (size + 3)));
  const k = Math.ceil(labels.length / fit);
  const keep = labels.map((_, i) => i).filter((i) => i % k === 0);
  return { tickvals: keep, ticktext: keep.map((i) => labels[i]), tickfont: { size } };
}

const widthOf = (el) => el.clientWidth || 800;

/** Every head of one kind: layers as rows, heads as columns. */
export function drawGrid(el, run, kind) {
  const pats = run.patterns[kind];
  const [ys, xs] = axesOf(run, kind);
  const L = pats.length, H = pats[0].length, height = Math.max(420, 190 * L);
  const cellW = ((widthOf(el) - 80) / H) * 0.94, cellH = ((height - 100) / L) * 0.88;  // one subplot's axes
  const traces = [], layout = {
    grid: { rows: L, columns: H, pattern: "independent", ygap: 0.12, xgap: 0.06 },
    margin: { l: 70, r: 10, t: 40, b: 60 }, height, title: { text: `Every head: ${KIND_TITLE[kind]}`, font: { size: 14 } },
    annotations: [],
  };
  pats.forEach((heads, l) => heads.forEach((z, h) => {
    const n = l * H + h + 1, ax = n === 1 ? "" : String(n);
    traces.push(heat(z, xs, ys, ax));
    layout["xaxis" + ax] = { ...ticks(xs, cellW, 8), showticklabels: l === L - 1, tickangle: -60 };
    layout["yaxis" + ax] = { ...ticks(ys, cellH, 8), autorange: "reversed", showticklabels: h === 0 };
    layout.annotations.push({ text: `L${l} H${h}`, xref: `x${ax} domain`, yref: `y${ax} domain`, x: 0.5, y: 1.12, showarrow: false, font: { size: 10 } });
  }));
  return Plotly().react(el, traces, layout, { responsive: true, displaylogo: false });
}

/** One head, large, with its weights written in the cells (the axis: the width less the margins and colour bar). */
export function drawHead(el, z, xs, ys, title) {
  const t = heat(z, xs, ys, "");
  t.showscale = true;
  t.texttemplate = xs.length * ys.length <= 400 ? "%{z:.2f}" : "";
  return Plotly().react(el, [t], {
    title: { text: title, font: { size: 14 } }, margin: { l: 90, r: 10, t: 40, b: 90 }, height: 480,
    xaxis: { ...ticks(xs, widthOf(el) - 180), tickangle: -60 }, yaxis: { ...ticks(ys, 480 - 130), autorange: "reversed" },
  }, { responsive: true, displaylogo: false });
}

/** The positional encoding added at each source position: positions as rows, dimensions as columns. */
export function drawPositions(el, pos, tokens) {
  return Plotly().react(el, [{
    type: "heatmap", z: pos, colorscale: "RdBu", zmin: -1, zmax: 1, y: tokens.map((_, i) => i),
    hovertemplate: "position %{y}, dimension %{x}: %{z:.3f}<extra></extra>",
  }], {
    title: { text: "Positional encoding (sin on even dimensions, cos on odd)", font: { size: 14 } },
    margin: { l: 90, r: 10, t: 40, b: 40 }, height: 360, xaxis: { title: { text: "dimension" } },
    yaxis: { ...ticks(tokens.map((t, i) => `${i} ${t}`), 360 - 80), autorange: "reversed" },
  }, { responsive: true, displaylogo: false });
}
