"""Bytes sent to the browser per translate interaction, with every view filled (issue 4).

``python app.py`` is launched on 127.0.0.1 and a free port. For each sentence (Multi30k
test_2016_flickr, first 20, the source side of --direction; 5 with --quick) a fresh browser
session is driven over the same HTTP protocol the Gradio front end uses (sse_v3): ``POST
/gradio_api/queue/join`` with the event's ``fn_index`` and the inputs' values, then ``GET
/gradio_api/queue/data?session_hash=...`` read until the event's ``process_completed``.

Counted, per event: the bytes of the HTTP responses the browser receives for it -- the join
response and the whole event stream (estimation, process_starts, every streamed
process_generating message, process_completed, close_stream), body bytes as they came off the
socket (``num_bytes_downloaded``; Gradio does not compress these routes) plus the status line
and response headers. Not counted: what the browser uploads, and the page itself (HTML, JS,
CSS, ``/config``: loaded once per visit, not per interaction; ``/config``'s size is reported).

One *interaction with every view filled* is the three events that fill all the app's views:

1. ``translate_stream`` (Translate button; UI defaults: greedy, max 100 tokens): the streamed
   translation, chips, attention grid, step 0 (prefix, top-k, cross and self rows), masks,
   embedding norms and the dropdown updates;
2. ``positional`` (opening the Positional encodings tab): the four encoding figures;
3. ``compare_ui`` (Compare button, positional encoding switched off): both translations,
   probabilities, the baseline / modified / difference maps and the masks.

Follow-up events that redraw one view (another attention kind, a step, a padded mask preview,
another compare map) are measured too and reported per event, not added to the total.

Run: ``python -m bench.payload [--checkpoints DIR] [--quick]``.
"""
from __future__ import annotations

import json
import time
import uuid

from .appbench import AppServer, load_note, models_line, models_used, resolve_root, standalone, unavailable
from .common import BenchConfig, entry, figure, read_lines, stats

N_SENTENCES = 20
N_QUICK = 5
TARGET_BYTES = 300_000  # 300 KB (1 KB = 1000 bytes here: the stricter reading)
EVENT_TIMEOUT = 120.0


def available(cfg: BenchConfig) -> str | None:
    return unavailable(cfg, need_server=True, need_module="httpx")


class Browser:
    """Just enough of the Gradio front end's sse_v3 protocol to run events and count their bytes."""

    def __init__(self, url: str, config: dict):
        import httpx
        self.base = url.rstrip("/") + config.get("api_prefix", "/gradio_api")
        self.http = httpx.Client(timeout=httpx.Timeout(EVENT_TIMEOUT, connect=10.0), headers={
            "Accept-Encoding": "gzip, deflate, br", "User-Agent": "bench.payload (a browser stand-in)"})
        self.cfg = config
        self.comps = {c["id"]: c for c in config["components"]}
        self.by_elem = {c.get("props", {}).get("elem_id"): c["id"] for c in config["components"]
                        if c.get("props", {}).get("elem_id")}
        self.deps = {d.get("api_name"): d for d in config["dependencies"] if d.get("api_name")}
        self.session = uuid.uuid4().hex[:11]

    def new_session(self) -> None:
        self.session = uuid.uuid4().hex[:11]

    def close(self) -> None:
        self.http.close()

    @staticmethod
    def _header_bytes(r) -> int:
        return len(f"HTTP/1.1 {r.status_code} {r.reason_phrase}\r\n") + sum(
            len(k) + len(v) + 4 for k, v in r.headers.raw) + 2

    def inputs_for(self, api_name: str, overrides: dict) -> list:
        """The event's input values: each component's current default, ``overrides`` by elem_id."""
        dep = self.deps[api_name]
        by_id = {self.by_elem[e]: v for e, v in overrides.items() if e in self.by_elem}
        data = []
        for cid in dep["inputs"]:
            c = self.comps[cid]
            if cid in by_id:
                data.append(by_id[cid])
            elif c.get("type") == "state":
                data.append(None)  # held on the server for the session
            else:
                data.append(c.get("props", {}).get("value"))
        return data

    def event(self, api_name: str, overrides: dict) -> dict:
        dep = self.deps[api_name]
        targets = dep.get("targets") or [[None, None]]
        body = {"data": self.inputs_for(api_name, overrides), "event_data": None, "fn_index": dep["id"],
                "trigger_id": targets[0][0], "session_hash": self.session}
        t0 = time.perf_counter()
        r = self.http.post(self.base + "/queue/join", json=body)
        join_bytes = r.num_bytes_downloaded + self._header_bytes(r)
        if r.status_code != 200:
            raise RuntimeError(f"{api_name}: queue/join answered {r.status_code}: {r.text[:300]}")
        event_id = r.json()["event_id"]
        sizes: dict[str, list[int]] = {}
        completed = None
        stream_bytes = header_bytes = 0
        encoding = None
        with self.http.stream("GET", self.base + "/queue/data", params={"session_hash": self.session}) as s:
            header_bytes = self._header_bytes(s)
            encoding = s.headers.get("content-encoding")
            buf = b""
            for chunk in s.iter_bytes():
                buf += chunk
                while b"\n\n" in buf:
                    raw, buf = buf.split(b"\n\n", 1)
                    if not raw.startswith(b"data:"):
                        continue
                    msg = json.loads(raw[5:])
                    sizes.setdefault(msg.get("msg", "?"), []).append(len(raw) + 2)
                    if msg.get("msg") == "process_completed" and msg.get("event_id") == event_id:
                        completed = msg
                if time.perf_counter() - t0 > EVENT_TIMEOUT:
                    raise TimeoutError(f"{api_name}: no process_completed within {EVENT_TIMEOUT:.0f} s")
                if completed is not None and "close_stream" in sizes:
                    break
            stream_bytes = s.num_bytes_downloaded
        if completed is None:
            raise RuntimeError(f"{api_name}: the event stream ended without process_completed ({sizes})")
        if not completed.get("success", True):
            raise RuntimeError(f"{api_name}: the event failed: {json.dumps(completed.get('output'))[:300]}")
        out = completed.get("output", {}).get("data") or []
        per_output = {}
        for cid, value in zip(dep["outputs"], out):
            c = self.comps.get(cid, {})
            label = c.get("props", {}).get("elem_id") or c.get("props", {}).get("label") or str(cid)
            per_output[label] = per_output.get(label, 0) + len(json.dumps(value, ensure_ascii=False).encode())
        return {"event": api_name, "bytes": join_bytes + header_bytes + stream_bytes, "join_bytes": join_bytes,
                "stream_headers": header_bytes, "stream_body": stream_bytes, "content_encoding": encoding,
                "messages": {k: {"n": len(v), "bytes": sum(v)} for k, v in sizes.items()},
                "final_output_json_bytes": per_output, "seconds": round(time.perf_counter() - t0, 3)}


def _kb_stats(byte_counts: list[int]) -> dict:
    return {k: (round(v, 1) if isinstance(v, float) else v) for k, v in stats([b / 1e3 for b in byte_counts]).items()}


def run(cfg: BenchConfig) -> dict:
    import httpx
    root, how = resolve_root(cfg)
    if root is None:
        raise SystemExit(f"error: {how}")
    models = models_used(root)
    direction = cfg.direction if any(m.get("direction") == cfg.direction for m in models) else \
        models[0]["direction"]
    src_lang = direction.split("-")[0]
    n = N_QUICK if cfg.quick else N_SENTENCES
    sentences, origin = read_lines(cfg, "test_2016_flickr", src_lang, n)
    load_note(cfg)
    print(f"payload: launching app.py with {root} ({how}); {len(sentences)} sentences, {direction}", flush=True)
    core = ("translate_stream", "positional", "compare_ui")
    extras = {"attention_view": {"attn-kind": "encoder.self_attn"},  # switch to the encoder self-attention grid
              "step_view": {"step-slider": 1},                         # move the step slider to step 1
              "masks": {"pad-to": 24},                                 # pad the source to 24 tokens
              "compare_maps": {"cmp-kind": "decoder.self_attn"}}       # another map in the compare view
    rows, extra_rows = [], {k: [] for k in extras}
    with AppServer(root, cfg.device) as srv:
        ready = srv.wait_ready()
        config_resp = httpx.get(srv.url + "config", headers={"Accept-Encoding": "gzip, deflate, br"}, timeout=30)
        config = config_resp.json()
        config_wire = config_resp.num_bytes_downloaded
        b = Browser(srv.url, config)
        missing = [a for a in (*core, *extras) if a not in b.deps]
        if any(a in missing for a in core):
            raise RuntimeError(f"the app has no event(s) {missing}; its api_names: {sorted(b.deps)}")
        for a in missing:
            extra_rows.pop(a, None)
            cfg.notes.append(f"event {a} not found in the app: not measured")
        try:
            base = {"direction": direction}
            # warm-up session (first requests pay for lazy imports), not counted
            b.event("translate_stream", {**base, "input-text": sentences[0]})
            for i, s in enumerate(sentences):
                b.new_session()
                ov = {**base, "input-text": s}
                ev = {a: b.event(a, ov if a != "compare_ui" else {**ov, "tog-positional": False}) for a in core}
                rows.append({"sentence": i, **{a: e["bytes"] for a, e in ev.items()},
                             "total": sum(e["bytes"] for e in ev.values()), "detail": ev})
                for a, o in extras.items():
                    if a in extra_rows:
                        extra_rows[a].append(b.event(a, {**ov, **o}))
                print(f"  sentence {i + 1:2d}: " + ", ".join(f"{a} {ev[a]['bytes'] / 1e3:.1f} kB" for a in core)
                      + f"; total {rows[-1]['total'] / 1e3:.1f} kB", flush=True)
        finally:
            b.close()
        logged_errors = srv.errors_logged()
    totals = [r["total"] for r in rows]
    for r in rows:
        r["no_positional"] = r["total"] - r["positional"]
    st = {a: _kb_stats([r[a] for r in rows]) for a in (*core, "total", "no_positional")}
    st_extra = {a: _kb_stats([e["bytes"] for e in evs]) for a, evs in extra_rows.items() if evs}
    d0 = sorted(rows, key=lambda r: r["total"])[(len(rows) - 1) // 2]["detail"]  # the median sentence
    largest = sorted(((f"{a}:{k}", v) for a, e in d0.items() for k, v in e["final_output_json_bytes"].items()),
                     key=lambda kv: -kv[1])[:8]
    tr0 = d0["translate_stream"]["messages"]
    figures = [
        figure("payload.total.p50_kb", "bytes per translate interaction, every view filled: p50 over sentences",
               st["total"]["p50"], "kB", f"≤ {TARGET_BYTES / 1e3:g} kB", "<=", TARGET_BYTES / 1e3),
        figure("payload.total.max_kb", "bytes per translate interaction, every view filled: max over sentences",
               round(max(totals) / 1e3, 1), "kB", f"≤ {TARGET_BYTES / 1e3:g} kB", "<=", TARGET_BYTES / 1e3),
        figure("payload.no_positional.p50_kb", "the same without the Positional tab (sentence-independent, sent "
               "each time the tab is opened): p50", st["no_positional"]["p50"], "kB"),
        figure("payload.translate.p50_kb", "of which the translate event (streamed; all Translate-tab views, "
               "attention grid, step 0, masks, norms): p50", st["translate_stream"]["p50"], "kB"),
        figure("payload.positional.p50_kb", "of which opening the Positional encodings tab: p50",
               st["positional"]["p50"], "kB"),
        figure("payload.compare.p50_kb", "of which Compare: p50", st["compare_ui"]["p50"], "kB"),
    ]
    for a, s_ in st_extra.items():
        figures.append(figure(f"payload.extra.{a}.p50_kb", f"follow-up event {a} (not in the total): p50",
                              s_["p50"], "kB"))
    details = {
        "model": f"app models from {root} ({how}): {models_line(models)}; direction {direction}",
        "data": origin,
        "method": ("python app.py on 127.0.0.1; per sentence a fresh session runs translate_stream, positional and "
                   "compare_ui (positional encoding off) over the sse_v3 protocol (POST queue/join, GET "
                   "queue/data until process_completed); counted: join response + event-stream response, body "
                   "bytes off the socket plus status line and headers; not counted: uploads and the page "
                   "(HTML/JS/CSS//config, once per visit). 1 kB = 1000 bytes."),
        "summary": (f"translate event p50 {st['translate_stream']['p50']:.1f} kB, positional "
                    f"{st['positional']['p50']:.1f} kB, compare {st['compare_ui']['p50']:.1f} kB; the translate "
                    f"stream's messages for the median sentence: "
                    + ", ".join(f"{k} ×{v['n']} {v['bytes'] / 1e3:.1f} kB" for k, v in tr0.items())
                    + f"; largest outputs (JSON of the final values): "
                    + ", ".join(f"{k} {v / 1e3:.1f} kB" for k, v in largest)
                    + f"; /config once per visit {len(config_resp.content) / 1e3:.1f} kB ({config_wire / 1e3:.1f} kB "
                      f"on the wire, {config_resp.headers.get('content-encoding') or 'uncompressed'})"),
        "kb": st,
        "extra_events_kb": st_extra,
        "per_sentence": [{k: v for k, v in r.items() if k != "detail"} for r in rows],
        "median_sentence_detail": d0,
        "extra_event_detail": {a: v[0] for a, v in extra_rows.items() if v},
        "server_ready_s": round(ready, 2),
        "server_errors_logged": logged_errors[:10],
        "models": models,
    }
    if max(totals) > TARGET_BYTES:
        cfg.notes.append("over the byte target: largest parts " + ", ".join(f"{k} {v / 1e3:.1f} kB"
                                                                           for k, v in largest[:4]))
    if logged_errors:
        cfg.notes.append(f"the server logged {len(logged_errors)} error line(s), e.g. {logged_errors[0][:200]}")
    return entry("payload", cfg, figures, details)


if __name__ == "__main__":
    from . import payload as _self
    raise SystemExit(standalone("payload", _self))
