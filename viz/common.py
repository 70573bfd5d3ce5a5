"""Shared helpers for the figure builders: escaping, token axes, subplot grids, colour scales.

Everything here is plain numpy + plotly. Token strings come from users and go into Plotly
labels, which render a subset of HTML, so every one of them passes through :func:`esc`.

Token axes are integer axes (0..n-1) labelled with ``tickvals``/``ticktext``, so the same
token twice stays two columns. Plotly's hover labels show the tick text of the hovered
position (even where tick labels are hidden), so hovers name the query and key tokens
without sending a string per cell.
"""
from __future__ import annotations

import html
import unicodedata
from collections import Counter
from collections.abc import Sequence

import numpy as np
import plotly.graph_objects as go
from plotly import colors as pcolors



def _scale(colors: list[str]) -> list[list]:
    return [[i / (len(colors) - 1), c] for i, c in enumerate(colors)]


# Explicit colour lists: figures skip Plotly's validation, which is what turns a name such as
# "Blues" into plotly.py's colours (plotly.js has its own, different, "Blues" and "RdBu").
ATTN_SCALE = _scale(pcolors.sequential.Blues)   # attention weights: 0 = white
DIVERGING = _scale(pcolors.diverging.RdBu)       # differences: red < 0 < blue, white at 0
BLANK_COLOR = "#e6e6e6"       # plot background: blanked (NaN) cells show as grey
CHOSEN_COLOR = "#d62728"
OTHER_COLOR = "#9ecae1"
MAX_LABEL = 24                # display columns of a token shown in a label (a CJK character takes two)
# Plotly draws text with the browser's fonts: the first that has a glyph wins, so Chinese renders
# wherever one of the CJK fonts is installed (Linux, macOS, Windows, in that order)
FONT_FAMILY = ("'Open Sans', ui-sans-serif, system-ui, 'Noto Sans CJK SC', 'Noto Sans SC', 'PingFang SC', "
               "'Hiragino Sans GB', 'Microsoft YaHei', 'Source Han Sans SC', sans-serif")
MASKED_COLOR = "#4d4d4d"      # masked cells (the mask forbids attending): dark grey, unlike weight 0 (white)
MAX_TICK_LABELS = 24          # more tokens than this: label every k-th tick instead of shrinking the font
MIN_LABEL_FONT = 10
STEP_ROW_TITLE = "decoder step: input → token it produced"
_SUBSCRIPT = str.maketrans("0123456789", "₀₁₂₃₄₅₆₇₈₉")


def layer_head(layer: int, head: int) -> str:
    """A head's name in a figure, counted from 0 as in the selection bar, which says so the same way:
    "layer 0 (first), head 2"."""
    return f"layer {layer}{' (first)' if layer == 0 else ''}, head {head}{' (first)' if head == 0 else ''}"


def esc(token) -> str:
    """HTML-escape a token for a Plotly label (quotes as numeric entities Plotly understands)."""
    s = html.escape(str(token), quote=False)
    return s.replace('"', "&#34;").replace("'", "&#39;")


def _columns(ch: str) -> int:
    return 2 if unicodedata.east_asian_width(ch) in ("W", "F") else 1


def display_width(text) -> int:
    """Display columns of ``text`` (an East Asian wide or full-width character takes two)."""
    return sum(map(_columns, str(text)))


def short(token, n: int = MAX_LABEL) -> str:
    """``token`` cut to ``n`` display columns with an ellipsis (a CJK character counts two)."""
    s = str(token)
    if display_width(s) <= n:
        return s
    out, width = [], 0
    for ch in s:
        width += _columns(ch)
        if width > n - 1:
            break
        out.append(ch)
    return "".join(out) + "…"


def full_hover(q_tokens: Sequence[str], k_tokens: Sequence[str], n: int = MAX_LABEL) -> list | None:
    """Per cell [query, key] as whole escaped tokens, where some label was cut (hovers then show them
    whole); None when every label is whole, so that no string per cell is sent."""
    if all(short(t, n) == str(t) for t in (*q_tokens, *k_tokens)):
        return None
    q, k = [esc(t) for t in q_tokens], [esc(t) for t in k_tokens]
    return [[[a, b] for b in k] for a in q]


def subscript(i: int) -> str:
    """6 -> '₆', 11 -> '₁₁'."""
    return str(int(i)).translate(_SUBSCRIPT)


def token_labels(tokens: Sequence[str], n: int = MAX_LABEL, *, number: bool = True) -> list[str]:
    """Escaped, shortened labels; an empty or blank token shows as a visible mark.

    With ``number`` (the default), a token that occurs more than once carries its position in
    the list as a subscript (``Hund₆``, ``Hund₁₁``), so axes and hovers tell the copies apart.
    """
    labels = [esc(short(t, n)) if str(t).strip() else "␣" for t in tokens]
    if number:
        counts = Counter(labels)
        labels = [lab + subscript(i) if counts[lab] > 1 else lab for i, lab in enumerate(labels)]
    return labels


def step_row_labels(decoder_inputs: Sequence[str], outputs: Sequence[str]) -> list[str]:
    """The one label convention for decoder query rows: ``'<bos>→Two'``, ``'Two→young'``, ...

    Row t of cross-attention and decoder self-attention is computed from ``decoder_inputs[t]``
    and produced ``outputs[t]``; the label names both. Plain text (escaped later, like any token);
    pair it with ``STEP_ROW_TITLE`` as the axis title. Lengths must match.
    """
    if len(decoder_inputs) != len(outputs):
        raise ValueError(f"{len(decoder_inputs)} decoder inputs but {len(outputs)} outputs")
    return [f"{short(a, 12)}→{short(b, 12)}" for a, b in zip(decoder_inputs, outputs)]


def label_step(n: int, max_labels: int = MAX_TICK_LABELS) -> int:
    """Label every k-th token so that at most ``max_labels`` labels show (k = 1: all)."""
    return max(1, -(-int(n) // max(1, int(max_labels))))


def _nth(k: int) -> str:
    return {2: "2nd", 3: "3rd"}.get(k, f"{k}th")


def thin_note(k: int) -> str:
    return f"every {_nth(k)} label shown (hover names every token)"


def token_axis(tokens: Sequence[str], *, show: bool = True, font_size: int | None = None,
               angle: int | None = None, number: bool = True) -> dict:
    """Layout for an integer axis 0..n-1 labelled with tokens (ticks and hover)."""
    labels = token_labels(tokens, number=number)
    axis = dict(tickmode="array", tickvals=list(range(len(labels))), ticktext=labels,
                showticklabels=show, showgrid=False, zeroline=False, ticks="")
    if font_size:
        axis["tickfont"] = dict(size=font_size)
    if angle is not None:
        axis["tickangle"] = angle
    return axis


def label_font_size(n: int) -> int:
    """Tick font size: never below MIN_LABEL_FONT; long axes are thinned instead (see thin_axes)."""
    return 12 if n <= 12 else MIN_LABEL_FONT


def _free_axis_number(layout: dict, letter: str) -> int:
    used = {1} | {int(k[5:]) for k in layout if k.startswith(letter + "axis") and k[5:].isdigit()}
    return max(used) + 1


def thin_axes(layout: dict, data: list, max_labels: int = MAX_TICK_LABELS, step: dict | None = None,
              block: dict | None = None) -> int:
    """Thin the tick labels of every long token axis in ``layout`` (in place); return the step used (1: none).

    Plotly's hover shows an axis's tick text only where there is a tick, so the data axis keeps
    every tick (hidden labels: hovers still name every token) and an overlaying twin axis that
    ``matches`` it shows every k-th label at a readable font size. ``step`` maps an axis key to a
    forced step; ``block`` maps an axis key to the length of the repeating label block (the grid
    mosaic repeats the tokens once per panel), so thinning restarts at every block. Plotly draws
    an axis only if a trace uses it, so each twin gets an empty, hover-less scatter in ``data``.
    """
    k_max = 1
    for key in [k for k in list(layout) if k[1:5] == "axis" and k[0] in "xy"]:
        ax = layout[key]
        vals, text = ax.get("tickvals"), ax.get("ticktext")
        if not ax.get("showticklabels", True) or vals is None or text is None or "overlaying" in ax:
            continue
        n_block = (block or {}).get(key) or len(vals)
        k = (step or {}).get(key) or label_step(n_block, max_labels)
        if k <= 1:
            continue
        k_max = max(k_max, k)
        letter, ref = key[0], key[0] + key[5:]
        keep = [i for i in range(len(vals)) if (i % n_block) % k == 0]
        twin = {kk: v for kk, v in ax.items() if kk not in ("domain", "tickvals", "ticktext")}
        twin.update(overlaying=ref, matches=ref, tickvals=[vals[i] for i in keep], ticktext=[text[i] for i in keep],
                    showticklabels=True)
        twin["tickfont"] = dict(size=max(MIN_LABEL_FONT, (ax.get("tickfont") or {}).get("size", 0)))
        ax["showticklabels"] = False
        ax.pop("title", None)  # the title goes with the visible labels, or it sits on top of them
        number = _free_axis_number(layout, letter)
        layout[f"{letter}axis{number}"] = twin
        other = "y" if letter == "x" else "x"
        data.append({"type": "scatter", "x": [], "y": [], "hoverinfo": "skip", "showlegend": False,
                     letter + "axis": f"{letter}{number}", other + "axis": ax.get("anchor", other)})
    return k_max


def axis_ids(i: int) -> tuple[str, str, str, str]:
    """Trace refs and layout keys of the i-th (0-based) subplot: ('x2', 'y2', 'xaxis2', 'yaxis2')."""
    sfx = "" if i == 0 else str(i + 1)
    return "x" + sfx, "y" + sfx, "xaxis" + sfx, "yaxis" + sfx


def grid_domains(rows: int, cols: int, hgap: float = 0.02, vgap: float = 0.04,
                 left: float = 0.0, right: float = 1.0, top: float = 1.0, bottom: float = 0.0):
    """Domains ((x0, x1), (y0, y1)) of a rows x cols grid, row-major, row 0 at the top.

    Written out by hand: ``make_subplots`` costs ~100 ms for a 4 x 4 grid, this costs nothing.
    """
    w = (right - left - hgap * (cols - 1)) / cols
    h = (top - bottom - vgap * (rows - 1)) / rows
    out = []
    for r in range(rows):
        y1 = top - r * (h + vgap)
        for c in range(cols):
            x0 = left + c * (w + hgap)
            out.append(((max(0.0, x0), min(1.0, x0 + w)), (max(0.0, y1 - h), min(1.0, y1))))
    return out


def subplot_title(text: str, xdom, ydom, size: int = 11) -> dict:
    return dict(text=text, x=(xdom[0] + xdom[1]) / 2, y=ydom[1], xref="paper", yref="paper",
                xanchor="center", yanchor="bottom", showarrow=False, font=dict(size=size))


NOTE_FONT = dict(size=11, color="#555")


def title_top(title: str | None, notes: Sequence[str] = (), base: int = 20) -> int:
    """Top margin that fits the title and its note line."""
    return base + (30 if title else 0) + (20 if any(notes) else 0)


def set_title(layout: dict, title: str | None, notes: Sequence[str] = (), top_extra: int = 0) -> dict:
    """(Re)write ``layout``'s title and top margin from plain-text ``title`` and ``notes``; returns layout.

    The notes (colour-scale mode, masks, label thinning) go in the title's subtitle, in smaller
    grey type; with no title they are the title, in the same small type. Both are escaped here.
    """
    note = esc(" · ".join(n for n in notes if n))
    if title:
        layout["title"] = dict(text=esc(title), x=0.01, xanchor="left", font=dict(size=14))
        if note:
            layout["title"]["subtitle"] = dict(text=note, font=NOTE_FONT)
    elif note:
        layout["title"] = dict(text=note, x=0.01, xanchor="left", font=NOTE_FONT)
    layout.setdefault("margin", {})["t"] = title_top(title, [note]) + top_extra
    return layout


def base_layout(height: int, title: str | None = None, *, notes: Sequence[str] = (), **extra) -> dict:
    """Layout defaults; ``title`` and ``notes`` are plain text (escaped here)."""
    layout = dict(template={}, height=int(height), autosize=True,  # = template "none": no theme payload
                  margin=dict(l=60, r=30, t=20, b=40),
                  plot_bgcolor=BLANK_COLOR, paper_bgcolor="white",
                  font=dict(size=12), hoverlabel=dict(align="left"))
    set_title(layout, title, notes)
    layout.update(extra)
    return layout


def scale_note(mode: str, zmax: float | None = None, panels: int = 1) -> str:
    """How the colour scale was chosen, for the title: 'shared' (0–1; "the same in every panel" only
    where there are several) or 'head' (own maximum, said where there is one)."""
    if mode == "shared":
        return "colour: 0–1" + (", the same in every panel" if panels > 1 else "")
    if mode == "head":
        return "colour: 0 to this head's maximum" + (f" ({zmax:.2f})" if zmax is not None else "")
    raise ValueError(f"colour-scale mode must be 'shared' or 'head', not {mode!r}")


def max_colorbar(zmax: float, what: str = "head") -> dict:
    """The colour bar of panels each scaled to their own maximum: 0 to "max", the maxima in the panels."""
    return dict(title=dict(text=f"÷ {what} max"), thickness=12, len=0.6, x=1.04,
                tickvals=[0.0, zmax], ticktext=["0", "its max"])


def mask_array(mask, shape: tuple[int, ...]) -> np.ndarray:
    """A boolean mask (True = attend, model/engine/masks.py) broadcast to ``shape`` (..., queries, keys)."""
    m = np.asarray(mask, dtype=bool)
    while m.ndim > len(shape) and m.shape[0] == 1:
        m = m[0]
    try:
        return np.broadcast_to(m, shape)
    except ValueError:
        raise ValueError(f"mask {m.shape} does not broadcast to attention {shape}") from None


def masked_layer(mask, shape: tuple[int, ...], query_valid=None) -> np.ndarray:
    """1.0 where the mask forbids attending (on valid query rows), NaN elsewhere: the 'masked' layer."""
    blocked = ~mask_array(mask, shape)
    z = np.where(blocked, 1.0, np.nan).astype(np.float32)
    return blank_rows(z, query_valid)


def apply_mask(z: np.ndarray, mask) -> np.ndarray:
    """Weights with masked cells set to NaN (drawn by the masked layer, not as a weight of 0)."""
    z = as_float(z)
    if mask is not None:
        z[~mask_array(mask, z.shape)] = np.nan
    return z


MASKED_HOVER = "%squery: %%{y}<br>key: %%{x}<br><b>masked</b> (not attended)<extra></extra>"
MASKED_NOTE = "dark grey: masked"


def masked_trace(zm: np.ndarray, label: str = "", **place) -> dict:
    """A flat dark-grey heatmap over the masked cells, hover 'masked'; ``place`` sets x0/y0/xaxis/yaxis."""
    prefix = f"{esc(label)}<br>" if label else ""
    return dict(type="heatmap", z=zm, colorscale=[[0, MASKED_COLOR], [1, MASKED_COLOR]], zmin=0, zmax=1,
                showscale=False, hoverongaps=False, hovertemplate=MASKED_HOVER % prefix, name="masked", **place)


def as_float(a) -> np.ndarray:
    """float32 copy (half the payload of float64; Plotly sends arrays as typed binary)."""
    return np.array(a, dtype=np.float32, copy=True)


def blank_rows(z: np.ndarray, valid: Sequence[bool] | np.ndarray | None) -> np.ndarray:
    """Set rows (second-to-last axis) whose ``valid`` is False to NaN: padding queries."""
    z = as_float(z)
    if valid is not None:
        valid = np.asarray(valid, dtype=bool)
        if valid.shape[0] != z.shape[-2]:
            raise ValueError(f"valid has {valid.shape[0]} rows, the matrix {z.shape[-2]}")
        z[..., ~valid, :] = np.nan
    return z


def finite_max(z: np.ndarray, default: float = 1.0) -> float:
    z = np.asarray(z, dtype=float)
    m = np.nanmax(z) if np.isfinite(z).any() else default
    return float(m) if m > 0 else default


def finite_absmax(z: np.ndarray, default: float = 1e-6) -> float:
    z = np.asarray(z, dtype=float)
    m = np.nanmax(np.abs(z)) if np.isfinite(z).any() else default
    return float(m) if m > 0 else default


PLOT_ROOM = 120  # px a fixed-height figure keeps between its margins; Plotly refuses to draw below ~64


def _finished(layout: dict) -> dict:
    layout.setdefault("font", {}).setdefault("family", FONT_FAMILY)
    margin, height = layout.get("margin") or {}, layout.get("height")
    if height is not None:  # tall titles and tick labels may take the plot's height (Plotly: "axis scaling")
        layout["height"] = max(int(height), margin.get("t", 100) + margin.get("b", 80) + PLOT_ROOM)
    return layout


def figure(data: list, layout: dict) -> go.Figure:
    """A Figure from plain dicts, without Plotly's per-property validation (it costs ~50 ms per grid).

    The tests rebuild every figure with validation on, so a wrong property still fails there.
    """
    return go.Figure(data=data, layout=_finished(layout), _validate=False)


MESSAGE_LINE = 52  # characters a message line holds: half a desktop row, or a phone's width, at 14 px


def wrap_words(text: str, width: int) -> list[str]:
    """``text`` broken at spaces into lines of at most ``width`` characters (a longer word keeps its line)."""
    lines, line = [], ""
    for word in str(text).split():
        if line and len(line) + 1 + len(word) > width:
            lines.append(line)
            line = word
        else:
            line = f"{line} {word}".strip()
    return [*lines, line]


def message_figure(text: str, height: int = 160) -> go.Figure:
    """A placeholder figure carrying only a message (e.g. 'translate a sentence first'), broken into lines
    that fit a half-width plot, so a whole sentence is never cut at its edges."""
    lines = wrap_words(text, MESSAGE_LINE)
    layout = base_layout(max(height, 60 + 22 * len(lines)), plot_bgcolor="white")
    layout.update(xaxis=dict(visible=False), yaxis=dict(visible=False),
                  annotations=[dict(text="<br>".join(esc(x) for x in lines), x=0.5, y=0.5, xref="paper",
                                    yref="paper", showarrow=False, font=dict(size=14, color="#666"))])
    return go.Figure(layout=_finished(layout), _validate=False)
