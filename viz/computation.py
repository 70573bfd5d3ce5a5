"""The computation, not only the weights: one head's arithmetic, residual-stream norms, norm-based
weights, the logit lens, attribution methods side by side, forced decoding, the embedding steps.

Plain numpy arrays and token lists in (the UI unpacks the engine's dataclasses), Plotly figures out.
Numbers travel as float32 rounded to 4 significant digits; hovers read them from z / y / customdata
through one hovertemplate per trace, so no cell carries its own hover string. Empty input gives a
message figure, never an exception; arrays that do not match their tokens raise ValueError.
"""
from __future__ import annotations

from collections.abc import Mapping, Sequence

import numpy as np
import plotly.graph_objects as go

from .common import (ATTN_SCALE, CHOSEN_COLOR, DIVERGING, MASKED_NOTE, MAX_TICK_LABELS, OTHER_COLOR, base_layout,
                     esc, figure, finite_absmax, finite_max, label_font_size, masked_trace, message_figure,
                     set_title, short, subplot_title, thin_axes, thin_note, token_axis, token_labels)

SIG = 4                      # significant digits sent to the browser
STRIP_PX = 28                # height of a one-row panel (a vector)
TITLE_PX = 26                # room above a panel for its title
DIM_LABELS_PX = 22           # room under a panel that shows numeric tick labels
COLORS = {"resid": "#333333", "attn": "#4a90d9", "cross": "#2ca02c", "ffn": "#f28e2b", "pos": "#9467bd"}
MASKED_HOVER = "key: %%{x}<br><b>masked (−∞)</b>%s<extra></extra>"


def rounded(a) -> np.ndarray:
    """float32 copy rounded to SIG significant digits; NaN and ±inf kept."""
    a = np.array(a, dtype=np.float64)
    ok = np.isfinite(a) & (a != 0)
    if ok.any():
        scale = 10.0 ** (SIG - 1 - np.floor(np.log10(np.abs(a[ok]))))
        a[ok] = np.round(a[ok] * scale) / scale
    return a.astype(np.float32)


def finite(a) -> np.ndarray:
    """:func:`rounded` with ±inf as NaN (Plotly can neither colour nor scale an infinity)."""
    a = rounded(a)
    a[~np.isfinite(a)] = np.nan
    return a


def _vector(a, n: int, name: str) -> np.ndarray:
    a = np.asarray(a, dtype=np.float64).ravel()
    if a.shape[0] != n:
        raise ValueError(f"{name} has {a.shape[0]} entries, expected {n}")
    return a


def _matrix(a, shape: tuple[int, int], name: str) -> np.ndarray:
    a = np.asarray(a, dtype=np.float64)
    if a.shape != shape:
        raise ValueError(f"{name} has shape {a.shape}, expected {shape}")
    return a


def _row_mean(a: np.ndarray) -> np.ndarray:
    """Mean over the last axis ignoring NaN/inf; NaN (no warning) where nothing is finite."""
    ok = np.isfinite(a)
    n = ok.sum(-1)
    return np.where(n > 0, np.where(ok, a, 0).sum(-1) / np.maximum(n, 1), np.nan)


def _heat(z, ref: int, hover: str, colorscale, lo: float, hi: float, **extra) -> dict:
    sfx = "" if ref == 1 else str(ref)
    return dict(type="heatmap", z=z, colorscale=colorscale, zmin=lo, zmax=hi, showscale=False, hoverongaps=False,
                hovertemplate=hover, xaxis="x" + sfx, yaxis="y" + sfx, **extra)


def _plain_axis(show: bool = False, **extra) -> dict:
    return dict(showgrid=False, zeroline=False, ticks="", showticklabels=show, **extra)


def _key_axis(tokens, show: bool, n: int = MAX_TICK_LABELS, **extra) -> dict:
    return token_axis([short(t, n) for t in tokens], show=show, font_size=label_font_size(len(tokens)), **extra)


# --------------------------------------------------------------------------- one head, one query

def _head_panels(q, K, scores, blocked, masked, pattern, V, z, result, d_k, query_token):
    """(column, title, z, x kind, y is keys, colour, show x labels, hover) per panel, in reading order."""
    s_lo = finite_absmax(np.concatenate([scores, masked[np.isfinite(masked)]]))
    qk = finite_absmax(np.concatenate([q, K.ravel()]))
    vz = finite_absmax(np.concatenate([V.ravel(), z]))
    who = f" of “{esc(short(query_token))}”" if str(query_token) else ""
    return [
        (0, f"q: the query{who}", q[None], "dim", False, ("div", qk), False, "q[%{x}] = %{z:.4g}"),
        (0, "K: one key per token (row), d_k columns", K, "dim", True, ("div", qk), True,
         "key %{y}<br>k[%{x}] = %{z:.4g}"),
        (0, f"scores = q·Kᵀ / √d_k (d_k = {d_k})", finite(scores)[None], "key", False, ("div", s_lo), False,
         "key %{x}<br>score = %{z:.4g}"),
        (0, "mask: score, or −∞ where the key is hidden", finite(np.where(blocked, np.nan, masked))[None], "key",
         False, ("div", s_lo), False, "key %{x}<br>score = %{z:.4g}"),
        (0, "α = softmax(masked scores)", finite(pattern)[None], "key", False, ("attn", 1.0), True,
         "key %{x}<br>α = %{z:.4~g}"),
        (1, "V: one value per token (row), d_k columns", V, "dim", True, ("div", vz), True,
         "key %{y}<br>v[%{x}] = %{z:.4g}"),
        (1, "z = αV = Σⱼ αⱼ vⱼ", z[None], "dim", False, ("div", vz), False, "z[%{x}] = %{z:.4g}"),
        (1, f"head output z · W_Oʰ (d_model = {result.shape[0]})", result[None], "model", False,
         ("div", finite_absmax(result)), True, "out[%{x}] = %{z:.4g}"),
    ]


# a legend in the figure's bottom strip (the bottom margin leaves it room under the axis labels)
BOTTOM_LEGEND = dict(orientation="h", x=0, xanchor="left", y=0, yanchor="bottom", yref="container",
                     font=dict(size=10))
ALPHA_TEXT_MAX = 16  # keys up to which α's cells say their weight: more left each number ~15 px in the tour


def _weight_text(z) -> dict:
    """Each weight written in its cell without the leading zero (".27", "1"): "0.27" ran into its neighbours."""
    text = [["" if not np.isfinite(v) else "1" if v >= 0.995 else f"{v:.2f}".removeprefix("0") for v in row]
            for row in np.asarray(z, dtype=np.float64)]
    return dict(text=text, texttemplate="%{text}", textfont=dict(size=9))


def _column_domains(panels, keys_px: int) -> tuple[list[tuple[float, float]], int]:
    """y domains of the panels, stacked per column with their titles inside the plot area; the plot height."""
    tops, heights, used, labels_above = [], [], {}, {}
    for col, _, _, _, is_keys, _, show_x, _ in panels:
        room = TITLE_PX + (DIM_LABELS_PX if labels_above.get(col) else 0)
        tops.append(used.get(col, 0) + room)
        heights.append(keys_px if is_keys else STRIP_PX)
        used[col], labels_above[col] = tops[-1] + heights[-1], show_x
    total = max(used.values())
    return [(1 - (t + h) / total, 1 - t / total) for t, h in zip(tops, heights)], total


def head_computation(query, keys, scores, mask, masked, pattern, values, z, result, key_tokens: Sequence[str],
                     query_token: str = "", d_k: int | None = None, title: str | None = None) -> go.Figure:
    """Inside one head for one query token, panel by panel as the tutorials write the formula.

    Left column: q (1×d_k), K (Tk×d_k), the scaled scores q·Kᵀ/√d_k, the scores with the mask
    applied (hidden keys dark grey, hover "masked (−∞)"), the softmax row α. Right column: V
    (Tk×d_k), z = αV (1×d_k), and the head's contribution after its slice of W_O (1×D). Each
    vector/matrix has its own diverging colour scale centred on 0 (q and K share one, V and z too);
    hovers give the numbers. ``mask``: (Tk,) bool, True = attend; ``masked``: scores with −∞.
    """
    Tk = len(key_tokens)
    q = np.asarray(query, dtype=np.float64).ravel()
    if Tk == 0 or q.size == 0:
        return message_figure("no keys to attend to" if Tk == 0 else "empty query vector")
    d = q.size
    K, V = _matrix(keys, (Tk, d), "keys"), _matrix(values, (Tk, d), "values")
    scores, masked = _vector(scores, Tk, "scores"), _vector(masked, Tk, "masked")
    blocked = ~np.asarray(mask, dtype=bool).ravel() | np.isneginf(masked)
    pattern, zv = _vector(pattern, Tk, "pattern"), _vector(z, d, "z")
    res = np.asarray(result, dtype=np.float64).ravel()
    panels = _head_panels(q, K, scores, blocked, masked, pattern, V, zv, res, d_k or d, query_token)
    keys_px = max(60, min(420, 18 * Tk))
    doms, total = _column_domains(panels, keys_px)
    xdoms = [(0.0, 0.44), (0.56, 1.0)]
    data, annotations = [], []
    layout = base_layout(total + 60 + 90)
    layout["margin"] = dict(l=90, r=20, b=90)
    for i, ((col, name, zz, xkind, is_keys, (kind, top), show_x, hover), yd) in enumerate(zip(panels, doms)):
        ref, sfx = i + 1, "" if i == 0 else str(i + 1)
        scale, lo = (DIVERGING, -top) if kind == "div" else (ATTN_SCALE, 0.0)
        extra = _weight_text(zz) if kind == "attn" and Tk <= ALPHA_TEXT_MAX else {}
        data.append(_heat(rounded(zz), ref, hover + "<extra></extra>", scale, lo, top, **extra))
        if xkind == "key":
            xa = _key_axis(key_tokens, show_x, angle=-60)
        else:
            xa = _plain_axis(show_x)
            if xkind == "model":  # the other dimension axes sit under a panel title: the titles say it
                xa["title"] = dict(text="d_model dimension", font=dict(size=10))
        ya = dict(_key_axis(key_tokens, True, 12), autorange="reversed") if is_keys else _plain_axis(fixedrange=True)
        layout["xaxis" + sfx] = dict(xa, domain=list(xdoms[col]), anchor="y" + sfx)
        layout["yaxis" + sfx] = dict(ya, domain=list(yd), anchor="x" + sfx)
        annotations.append(subplot_title(name, xdoms[col], yd))
    for ref, what in ((4, ""), (5, " → α = 0")):  # the mask row and the softmax row
        if blocked.any():
            tr = masked_trace(np.where(blocked, 1.0, np.nan).astype(np.float32)[None],
                              xaxis=f"x{ref}", yaxis=f"y{ref}")
            data.append(dict(tr, hovertemplate=MASKED_HOVER % what))
    for a, b in (("xaxis", "x2"), ("xaxis3", "x5"), ("xaxis4", "x5"), ("xaxis7", "x6")):
        layout[a]["matches"] = b  # a vector lines up with the matrix it multiplies
    k = thin_axes(layout, data)
    layout["annotations"] = annotations
    set_title(layout, title, ["colour: blue > 0 > red, per panel; hover for the numbers",
                              MASKED_NOTE if blocked.any() else "", thin_note(k) if k > 1 else ""])
    return figure(data, layout)


# --------------------------------------------------------------------------- residual stream

def boundaries(L: int) -> list[str]:
    """Names of the L + 1 points where the residual stream is read."""
    return ["input"] + [f"after layer {i}" for i in range(L)]


def _layer_series(resid, attn, cross, ffn, where: str = "mean over positions") -> list[dict]:
    """Mean over the positions given: the residual's norm between layers (line), what each layer adds (bars)."""
    L = attn.shape[0]
    layers = np.arange(L, dtype=np.int32)
    data = [dict(type="scatter", x=np.arange(L + 1), y=finite(_row_mean(resid)), mode="lines+markers",
                 name="‖residual stream‖", line=dict(color=COLORS["resid"]), customdata=boundaries(L),
                 hovertemplate=f"%{{customdata}}: ‖residual‖ = %{{y:.4g}}<extra>{esc(where)}</extra>")]
    for key, arr, name in (("attn", attn, "self-attention"), ("cross", cross, "cross-attention"),
                           ("ffn", ffn, "feed-forward")):
        if arr is None:
            continue
        data.append(dict(type="bar", x=layers + 0.5, y=finite(_row_mean(arr)), customdata=layers, name=f"+ {name}",
                         marker=dict(color=COLORS[key]),
                         hovertemplate=f"layer %{{customdata}} adds ‖{name}‖ = %{{y:.4g}}<extra>{esc(where)}"
                                       "</extra>"))
    return data


def residual_norms(resid, attn, ffn, cross=None, tokens: Sequence[str] = (), title: str | None = None,
                   position: int | None = None) -> go.Figure:
    """The residual stream's size through the stack, and what each sublayer adds to it.

    ``resid``: (L + 1, T) L2 norm before layer 0 and after each layer; ``attn`` / ``ffn`` / ``cross``
    (L, T): norms of the self-attention / FFN / cross-attention (decoder only) contributions.
    Left: mean over positions, the residual as a line at layer boundaries, the contributions as
    grouped bars between them. Right: the residual's norm per position and layer. ``tokens``
    label the positions (their indices when empty). ``position``: the left panel shows that position
    alone (instead of the mean), and the right one outlines its column.
    """
    resid = np.asarray(resid, dtype=np.float64)
    if resid.ndim != 2 or resid.size == 0:
        return message_figure("no residual stream to show")
    L1, T = resid.shape
    attn, ffn = _matrix(attn, (L1 - 1, T), "attn"), _matrix(ffn, (L1 - 1, T), "ffn")
    cross = None if cross is None else _matrix(cross, (L1 - 1, T), "cross")
    tokens = list(tokens) or [str(i) for i in range(T)]
    if len(tokens) != T:
        raise ValueError(f"{len(tokens)} tokens for {T} positions")
    left = "mean over positions"
    if position is not None:
        position = max(0, min(int(position), T - 1))
        left = f"position {position} ({tokens[position]})"
        one = lambda a: None if a is None else a[:, position:position + 1]  # noqa: E731
        data = _layer_series(one(resid), one(attn), one(cross), one(ffn), left)
    else:
        data = _layer_series(resid, attn, cross, ffn)
    rows = boundaries(L1 - 1)
    z = finite(resid)
    data.append(dict(type="heatmap", z=z, xaxis="x2", yaxis="y2", colorscale=ATTN_SCALE, zmin=0.0,
                     zmax=finite_max(z), hoverongaps=False, name="‖residual‖",
                     hovertemplate="%{y}<br>position %{x}<br>‖residual‖ = %{z:.4g}<extra></extra>",
                     colorbar=dict(title=dict(text="‖x‖"), thickness=10, x=1.0)))
    # the legend in the figure's bottom strip, under every axis's labels (long tokens ran into it)
    layout = base_layout(230 + min(360, max(160, 28 * L1)), plot_bgcolor="white", barmode="group",
                         legend=BOTTOM_LEGEND)
    ticks = ["input"] + [str(i + 1) for i in range(L1 - 1)]
    layout["xaxis"] = dict(domain=[0, 0.38], tickmode="array", tickvals=list(range(L1)), ticktext=ticks,
                           title=dict(text="layer boundary (bars: layer l, between l and l+1)", font=dict(size=10)),
                           showgrid=True, gridcolor="#eee", zeroline=False)
    # a short axis title: a long one ran up past the axis into the subtitle
    layout["yaxis"] = dict(title=dict(text="L2 norm" if position is not None else "mean L2 norm",
                                      font=dict(size=11)), rangemode="tozero", showgrid=True, gridcolor="#eee")
    layout["xaxis2"] = dict(token_axis(tokens, font_size=label_font_size(T), angle=-60 if T > 8 else None),
                            domain=[0.52, 0.94], anchor="y2")
    layout["yaxis2"] = dict(token_axis(rows, font_size=10, number=False), anchor="x2", autorange="reversed")
    layout["margin"] = dict(l=60, r=20, b=140 if T > 8 else 110)
    k = thin_axes(layout, data)
    if position is not None:
        layout["shapes"] = [dict(type="rect", xref="x2", yref="y2 domain", x0=position - 0.5, x1=position + 0.5,
                                 y0=0, y1=1, line=dict(color=COLORS["resid"], width=2), fillcolor="rgba(0,0,0,0)")]
    layout["annotations"] = [subplot_title(esc(left), (0, 0.38), (0, 1)),
                             subplot_title("‖residual stream‖ per position", (0.52, 0.94), (0, 1))]
    set_title(layout, title, ["L2 norms", thin_note(k) if k > 1 else ""], top_extra=10)
    return figure(data, layout)


# --------------------------------------------------------------------------- norm-based weights

def row_normalised(a) -> np.ndarray:
    """Each row divided by its sum (NaN where the sum is not positive): shares that compare across methods."""
    a = np.asarray(a, dtype=np.float64)
    s = np.where(np.isfinite(a), a, 0).sum(-1, keepdims=True)
    return np.divide(a, s, out=np.full_like(a, np.nan), where=s > 0)


def norm_vs_attention(pattern, norm_weights, q_tokens: Sequence[str], k_tokens: Sequence[str],
                      title: str | None = None, notes: Sequence[str] = ()) -> go.Figure:
    """One head's attention α beside its norm-based weights ‖α·f(x)‖ (Kobayashi et al. 2020); ``notes``
    join the subtitle.

    Both are row-normalised (each query row sums to 1) and share one colour axis; the hover shows
    the share and the raw value. A key with a large weight but a small transformed value f(x)
    (often <bos> or punctuation) fades in the right panel.
    """
    Q, K = len(q_tokens), len(k_tokens)
    if Q == 0 or K == 0:
        return message_figure("no tokens to compare")
    raw = [_matrix(pattern, (Q, K), "pattern"), _matrix(norm_weights, (Q, K), "norm_weights")]
    shares = [finite(row_normalised(a)) for a in raw]
    top = max(finite_max(s) for s in shares)
    names = ["attention α", "norm-based ‖α·f(x)‖"]
    fs = label_font_size(max(Q, K))
    data, annotations = [], []
    layout = base_layout(160 + min(520, max(220, 24 * Q)))
    for i, (name, z, r) in enumerate(zip(names, shares, raw)):
        sfx = "" if i == 0 else "2"
        xd = (0.0, 0.44) if i == 0 else (0.5, 0.94)
        data.append(dict(type="heatmap", z=z, customdata=rounded(r), coloraxis="coloraxis", xaxis="x" + sfx,
                         yaxis="y" + sfx, hoverongaps=False,
                         hovertemplate=f"{name}<br>query: %{{y}}<br>key: %{{x}}<br>share of row: %{{z:.4~g}}"
                                       "<br>raw: %{customdata:.4g}<extra></extra>"))
        layout["xaxis" + sfx] = dict(token_axis(k_tokens, font_size=fs, angle=-60 if K > 8 else None),
                                     domain=list(xd), anchor="y" + sfx)
        layout["yaxis" + sfx] = dict(token_axis(q_tokens, font_size=fs, show=i == 0), anchor="x" + sfx,
                                     autorange="reversed")
        annotations.append(subplot_title(name, xd, (0, 1)))
    layout["xaxis2"]["matches"], layout["yaxis2"]["matches"] = "x", "y"
    layout["margin"] = dict(l=100, r=20, b=100)
    layout["coloraxis"] = dict(colorscale=ATTN_SCALE, cmin=0.0, cmax=top,
                               colorbar=dict(title=dict(text="share"), thickness=10, x=0.96))
    k = thin_axes(layout, data)
    layout["annotations"] = annotations
    set_title(layout, title, ["each row normalised to sum 1, one colour scale", thin_note(k) if k > 1 else "",
                              *notes], top_extra=10)
    return figure(data, layout)


# --------------------------------------------------------------------------- logit lens

def logit_lens(top_tokens: Sequence[Sequence[Sequence[str]]], top_probs, step_tokens: Sequence[str],
               title: str | None = None, notes: Sequence[str] = ()) -> go.Figure:
    """What the decoder would say if it stopped after each layer, at every output step (``notes`` join
    the subtitle).

    ``top_tokens[l][t]``: the k most likely tokens after layer l at step t (through the final norm
    and the generator); ``top_probs`` (L, T, k) their probabilities. Each cell shows the top-1
    token, coloured by its probability (0–1); the hover lists the top k.
    """
    P = np.asarray(top_probs, dtype=np.float64)
    if P.ndim != 3 or 0 in P.shape:
        return message_figure("no logit lens to show")
    L, T, k = P.shape
    if len(step_tokens) != T or len(top_tokens) != L or any(len(row) != T for row in top_tokens):
        raise ValueError(f"top_tokens and step_tokens do not match probabilities {P.shape}")
    labels = [[[esc(short(w, 16)) for w in cell][:k] + [""] * (k - len(cell)) for cell in row] for row in top_tokens]
    probs = finite(P)
    # per cell: k tokens then k probabilities, read by one hovertemplate
    custom = [[cell + [None if np.isnan(p) else float(p) for p in probs[l, t]] for t, cell in enumerate(row)]
              for l, row in enumerate(labels)]
    lines = "".join(f"<br>{i + 1}. %{{customdata[{i}]}}  %{{customdata[{k + i}]:.2%}}" for i in range(k))
    text = [[esc(short(cell[0], 8)) if cell else "" for cell in row] for row in top_tokens]
    fs = label_font_size(T)
    trace = dict(type="heatmap", z=probs[:, :, 0], text=text, customdata=custom, texttemplate="%{text}",
                 textfont=dict(size=10 if T <= 16 else 8), colorscale=ATTN_SCALE, zmin=0.0, zmax=1.0,
                 hoverongaps=False, xgap=1, ygap=1, hovertemplate="%{y}, step %{x}" + lines + "<extra></extra>",
                 colorbar=dict(title=dict(text="p(top-1)"), thickness=10))
    layout = base_layout(150 + 34 * L, plot_bgcolor="white",
                         xaxis=token_axis(step_tokens, font_size=fs, angle=-60 if T > 8 else None),
                         yaxis=dict(token_axis([f"after layer {l}" for l in range(L)], font_size=10, number=False),
                                    autorange="reversed"))
    data = [trace]
    n = thin_axes(layout, data)
    # the step labels, turned by 60°, take up to sin(60°) of their length below the axis; the title goes
    # under them (a fixed margin let long words run into it)
    longest = max((len(str(t)) for t in layout["xaxis"]["ticktext"]), default=0)
    drop = int(0.87 * 0.6 * fs * longest) if T > 8 else fs + 4
    layout["xaxis"]["title"] = dict(text="output step", font=dict(size=11), standoff=8)
    layout["xaxis"]["automargin"] = True
    layout["margin"] = dict(l=90, r=20, b=max(100, drop + 40))
    set_title(layout, title, [f"text: top-1 token after each layer; colour: its probability; hover: top {k}",
                              "last row = the model's output", thin_note(n) if n > 1 else "", *notes])
    # the rows' own height under the title and over the labels: a shallow model's colour bar kept ~30 px
    # for its three ticks, which ran into each other
    layout["height"] = layout["margin"]["t"] + layout["margin"]["b"] + max(100, 34 * L)
    return figure(data, layout)


# --------------------------------------------------------------------------- attribution methods

def _scaled_scores(scores: Mapping[str, np.ndarray], S: int) -> tuple[np.ndarray, np.ndarray]:
    """(M, S) each method divided by its own max |score| (signs kept), and the raw (M, S)."""
    raw = np.stack([_vector(v, S, f"scores[{name!r}]") for name, v in scores.items()])
    top = np.array([finite_absmax(r, default=1.0) for r in raw])[:, None]
    return raw / top, raw


def _correlation_annotations(rho: np.ndarray) -> list[dict]:
    return [dict(text="n/a" if np.isnan(v) else f"{v:.2f}", x=j, y=i, xref="x2", yref="y2", showarrow=False,
                 font=dict(size=10, color="#222" if np.isnan(v) or abs(v) < 0.6 else "white"))
            for i, row in enumerate(rho) for j, v in enumerate(row)]


def attribution_comparison(src_tokens: Sequence[str], scores: Mapping[str, np.ndarray], correlations,
                           method_labels: Sequence[str] | None = None, token: str = "",
                           source_share: float | None = None, title: str | None = None) -> go.Figure:
    """Which source tokens the output ``token`` came from, one row per method, and how the methods agree.

    Left: methods × source tokens; each method divided by its own max |score| (signs kept, so
    gradient methods can go negative), diverging −1..1; hover: the scaled and the raw score.
    Right: Spearman rank correlations between the methods (M × M, rows in ``scores`` order),
    numbers in the cells, "n/a" where a method is constant. ``source_share``: ALTI+'s share of the
    prediction that comes from the source (the rest: the target prefix), said in the subtitle.
    """
    S, M = len(src_tokens), len(scores)
    if S == 0 or M == 0:
        return message_figure("no attribution to show")
    scaled, raw = _scaled_scores(scores, S)
    rho = finite(_matrix(correlations, (M, M), "correlations"))
    names = [str(n) for n in (method_labels or list(scores))]
    if len(names) != M:
        raise ValueError(f"{len(names)} method labels for {M} methods")
    fs = label_font_size(S)
    cell_text = dict(texttemplate="%{z:.2f}", textfont=dict(size=9)) if S <= 20 else {}
    data = [dict(type="heatmap", z=finite(scaled), customdata=rounded(raw), colorscale=DIVERGING, zmin=-1.0,
                 zmax=1.0, zmid=0.0, hoverongaps=False, colorbar=dict(title=dict(text="÷ max|·|"), thickness=10,
                                                                       x=0.6), **cell_text,
                 hovertemplate="%{y}<br>source: %{x}<br>scaled: %{z:.3f}<br>raw: %{customdata:.4g}<extra></extra>"),
            dict(type="heatmap", z=rho, xaxis="x2", yaxis="y2", colorscale=DIVERGING, zmin=-1.0, zmax=1.0,
                 showscale=False, hoverongaps=False, hovertemplate="%{y} vs %{x}<br>ρ = %{z:.3f}<extra></extra>")]
    method_axis = dict(token_axis(names, font_size=10, number=False), autorange="reversed")
    layout = base_layout(170 + max(200, 30 * M), xaxis=dict(token_axis(src_tokens, font_size=fs, angle=-60),
                                                            domain=[0, 0.58]),
                         yaxis=method_axis, xaxis2=dict(token_axis(names, font_size=9, number=False, angle=-45),
                                                         domain=[0.8, 1.0], anchor="y2"),
                         yaxis2=dict(method_axis, anchor="x2", tickfont=dict(size=9)))  # its rows named too
    layout["margin"] = dict(l=140, r=20, b=110)
    n = thin_axes(layout, data)
    layout["annotations"] = [subplot_title("each method ÷ its max |score|", (0, 0.58), (0, 1)),
                             subplot_title("Spearman ρ between methods", (0.8, 1.0), (0, 1))]
    layout["annotations"] += _correlation_annotations(rho)
    share = "" if source_share is None or not np.isfinite(source_share) else \
        f"ALTI+: {source_share:.0%} from the source, {1 - source_share:.0%} from the target prefix"
    who = f"output token “{short(token)}”" if str(token) else ""
    set_title(layout, title, [who, share, thin_note(n) if n > 1 else ""], top_extra=10)
    return figure(data, layout)


# --------------------------------------------------------------------------- forced decoding

def forced_decoding(target_tokens: Sequence[str], prob, loss, top_tokens: Sequence[str], differs: Sequence[bool],
                    title: str | None = None) -> go.Figure:
    """The model teacher-forced on a reference, token by token.

    Bars: probability of each reference token (fixed 0–100 % axis), red where the model's own
    top-1 is another token, that token written above the bar (▼). Line (right axis): the
    cross-entropy −log p in nats; an infinite loss (p = 0) leaves a gap. The perplexity is the
    caller's to put in ``title``.
    """
    T = len(target_tokens)
    if T == 0:
        return message_figure("no reference tokens")
    p, nats = finite(_vector(prob, T, "prob")), finite(_vector(loss, T, "loss"))
    if len(top_tokens) != T or len(differs) != T:
        raise ValueError(f"top_tokens and differs need {T} entries")
    off = np.asarray(differs, dtype=bool)
    x = np.arange(T)
    data = [dict(type="bar", x=x, y=p, customdata=nats, name="p(reference token)",
                 marker=dict(color=[CHOSEN_COLOR if d else OTHER_COLOR for d in off]),
                 hovertemplate="reference: %{x}<br>p = %{y:.2%}<br>loss = %{customdata:.4g} nats<extra></extra>"),
            dict(type="scatter", x=x, y=nats, yaxis="y2", mode="lines+markers", name="loss (nats)",
                 line=dict(color="#333", width=1.5), marker=dict(size=5),
                 hovertemplate="reference: %{x}<br>−log p = %{y:.4g} nats<extra></extra>")]
    if off.any():
        idx = np.flatnonzero(off)
        data.append(dict(type="scatter", x=idx, y=np.ones(len(idx), np.float32), mode="markers+text",
                         name="model's top-1 differs", text=[esc(short(top_tokens[i], 12)) for i in idx],
                         textposition="top center", textfont=dict(size=10, color=CHOSEN_COLOR), cliponaxis=False,
                         marker=dict(symbol="triangle-down", size=9, color=CHOSEN_COLOR),
                         hovertemplate="reference: %{x}<br>model's top-1: %{text}<extra></extra>"))
    fs = label_font_size(T)
    layout = base_layout(380, plot_bgcolor="white", barmode="overlay",
                         xaxis=token_axis(target_tokens, font_size=fs, angle=-60 if T > 8 else None),
                         yaxis=dict(range=[0, 1], fixedrange=True, tickformat=".0%", dtick=0.25, showgrid=True,
                                    gridcolor="#eee", title=dict(text="p(reference token)")),
                         yaxis2=dict(overlaying="y", side="right", rangemode="tozero", showgrid=False,
                                     title=dict(text="cross-entropy (nats)")),
                         legend=dict(orientation="h", x=0, y=-0.35, font=dict(size=10)))
    layout["xaxis"]["title"] = dict(text="reference token", font=dict(size=11))
    layout["margin"] = dict(l=60, r=60, b=120)
    n = thin_axes(layout, data)
    bad = int(np.isnan(nats).sum())
    set_title(layout, title, [f"▼ red: {int(off.sum())} of {T} where the model's top-1 differs (written above)",
                              f"{bad} infinite loss(es) not drawn" if bad else "", thin_note(n) if n > 1 else ""],
              top_extra=20)
    return figure(data, layout)


# --------------------------------------------------------------------------- embedding steps

STEP_NAMES = ("token embedding e", "e × √d_model", "positional encoding", "e × √d_model + PE")


def _detail_trace(detail, n_dims: int) -> dict:
    """(4, n) first dimensions of one position's token / scaled / pos / total vectors, on the lower axes."""
    z = finite(np.asarray(detail, dtype=np.float64)[:, :n_dims])
    m = finite_absmax(z)
    return dict(type="heatmap", z=z, xaxis="x2", yaxis="y2", colorscale=DIVERGING, zmin=-m, zmax=m, zmid=0.0,
                hoverongaps=False, colorbar=dict(title=dict(text="value"), thickness=10, len=0.35, y=0.15),
                hovertemplate="%{y}<br>dimension %{x}<br>%{z:.4g}<extra></extra>")


def embedding_steps(tokens: Sequence[str], token_norm, scaled_norm, pos_norm, total_norm, scale: float,
                    title: str | None = None, *, detail=None, position: int = 0, n_dims: int = 16) -> go.Figure:
    """The first layer's input as the tutorials build it, per position: L2 norms of the token
    embedding, of it × √d_model (``scale``), of the positional encoding, and of the sum.

    ``detail``: optional (4, D) rows of those four vectors at ``position``; its first ``n_dims``
    dimensions go in a small heatmap under the bars.
    """
    T = len(tokens)
    if T == 0:
        return message_figure("no tokens to embed")
    norms = [finite(_vector(a, T, n)) for a, n in ((token_norm, "token_norm"), (scaled_norm, "scaled_norm"),
                                                     (pos_norm, "pos_norm"), (total_norm, "total_norm"))]
    colors = [OTHER_COLOR, COLORS["attn"], COLORS["ffn"], COLORS["resid"]]
    x = np.arange(T)
    data = [dict(type="bar", x=x, y=y, name=name, marker=dict(color=c),
                 hovertemplate=f"%{{x}}<br>‖{name}‖ = %{{y:.4g}}<extra></extra>")
            for name, y, c in zip(STEP_NAMES, norms, colors)]
    fs = label_font_size(T)
    has_detail = detail is not None and np.size(detail) > 0 and 0 <= position < T
    split = 0.42 if has_detail else 0.0
    layout = base_layout(360 + (190 if has_detail else 0), plot_bgcolor="white", barmode="group",
                         xaxis=token_axis(tokens, font_size=fs, angle=-60 if T > 8 else None),
                         yaxis=dict(domain=[split, 1.0], title=dict(text="L2 norm"), showgrid=True, gridcolor="#eee",
                                    rangemode="tozero"),
                         legend=BOTTOM_LEGEND)  # above the plot, a long sentence's legend ran into the subtitle
    layout["xaxis"]["anchor"] = "y"
    # the bottom margin: the lowest axis's labels (the detail's dimensions, else the tokens), then the legend
    layout["margin"] = dict(l=130 if has_detail else 60, r=30, b=50 + (30 if has_detail else 70 if T > 8 else 30))
    annotations = []
    if has_detail:
        data.append(_detail_trace(detail, n_dims))
        layout["xaxis2"] = dict(anchor="y2", showgrid=False, zeroline=False)
        layout["yaxis2"] = dict(token_axis(STEP_NAMES, font_size=10, number=False), domain=[0, split - 0.2],
                                anchor="x2", autorange="reversed")
        label = token_labels(tokens)[position]
        annotations.append(subplot_title(f"dimensions 0–{min(n_dims, np.shape(detail)[-1]) - 1} at position "
                                         f"{position} ({label})", (0, 1), (0, split - 0.2)))
    n = thin_axes(layout, data)
    layout["annotations"] = annotations
    set_title(layout, title, [f"√d_model = {scale:.4g}", thin_note(n) if n > 1 else ""], top_extra=40)
    return figure(data, layout)
