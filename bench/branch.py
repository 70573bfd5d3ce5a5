"""Continue from here: server time and bytes of a branch, in process, through Gradio's own processing.

The app is built as ``python app.py`` builds it and each event runs the way the server runs it
(``Blocks.process_api``: preprocess, the handler, postprocess), as in ``bench.server``. Per sentence
(the first 20 Multi30k test sentences), in one session: Translate (greedy, the UI's defaults), open
Generation, move to step 2 (the candidates' list fills), pick the model's second candidate there and
press "Continue from here" (``continue_step``: the forced prefix, then greedy, made the current run with
every view of it and Generation's at that step), then ◀ back to the first run (``history_back``: no model
call). Timed: each of those events' server time and the JSON it sends; and the branch's decode alone
(``gpu_translate_one`` with the prefix, the cache bypassed). Not included: HTTP and the queue
(``bench.payload`` measures the wire; JSON here is within a few hundred bytes of it per event).
"""
from __future__ import annotations

import statistics
from dataclasses import replace

from .common import InProcessApp, entry, figure, ms, sentences, standalone, stats

N, N_QUICK = 20, 5
TARGET_MS, TARGET_KB = 150.0, 300.0
STEP = 2  # the step a student branches at (a short output branches at its second-to-last step)


def branch_figures(st: dict, per: dict, cpu: dict) -> list[dict]:
    """The table's lines: server time (wall and CPU), the decode alone, the JSON sent; and ◀ back's."""
    return [
        figure("branch.continue.p50_ms", "continue from here (greedy), the whole event: server time p50",
               st["continue_step"][0]["p50"], "ms", "<=", TARGET_MS),
        figure("branch.continue_cpu.p50_ms", "continue from here in CPU time of the process (others' load aside): "
               "p50", statistics.median(cpu["continue_step"]), "ms"),
        figure("branch.continue.p95_ms", "continue from here: p95", st["continue_step"][0]["p95"], "ms"),
        figure("branch.decode.p50_ms", "of which the branch's decode (forced prefix, greedy, full trace): p50",
               st["decode"][0]["p50"], "ms"),
        figure("branch.continue.max_kb", "continue from here: JSON sent, max over sentences",
               st["continue_step"][1]["max"], "kB", "<=", TARGET_KB),
        figure("branch.interaction.max_kb", "one interaction (candidates' list + continue): max",
               max(a + b for a, b in zip(per["branch_candidates"][1], per["continue_step"][1])), "kB", "<=",
               TARGET_KB),
        figure("branch.history_back.p50_ms", "◀ back to the previous run (no model call): server time p50",
               st["history_back"][0]["p50"], "ms"),
        figure("branch.history_back.max_kb", "◀ back: JSON sent, max", st["history_back"][1]["max"], "kB", "<=",
               TARGET_KB),
    ]


def run(cfg) -> dict:
    from model.engine.branching import step_prefix
    from ui import calls
    from ui.sections import translate

    app = InProcessApp(cfg)
    demo, key, fns = app.demo, app.key, app.fns
    name = cfg.direction
    texts = sentences(cfg, name.split("-")[0], N_QUICK if cfg.quick else N)
    reps = cfg.reps or (1 if cfg.quick else 3)

    def event(state, api, values) -> tuple[float, int]:
        """(ms, JSON bytes) of one event; its process CPU ms kept aside."""
        e = app.event(state, api, values)
        cpu.setdefault(api, []).append(e.cpu_ms)
        return e.ms, e.bytes

    cpu: dict[str, list[float]] = {}
    per = {k: ([], []) for k in ("continue_step", "branch_candidates", "history_back", "decode")}
    for i, text in enumerate(texts):
        state = app.session()
        v = {"input-text": text, "direction": name}
        event(state, "translate_stream", v)
        run_ = next(state[c._id] for c in fns["translate_stream"].outputs if c.stateful)
        step = max(0, min(STEP, run_.n_steps - 2))
        pick = run_.tr.steps[step].topk_tokens[1]  # the model's runner-up: a real branch
        event(state, "open_generation", v)
        v |= {"step-slider": step, "branch-pick": pick}
        for a in ("branch_candidates", "continue_step", "history_back"):
            t, size = event(state, a, v)
            per[a][0].append(t)
            per[a][1].append(size / 1e3)
        prefix = step_prefix(run_.tr, step, demo.registry.models[name].tgt_vocab.stoi[pick])
        opts = replace(translate.opts_from("greedy", 4, 100), prefix=prefix)
        per["decode"][0].append(statistics.median(ms(lambda: calls.gpu_translate_one(key, name, text, opts))
                                                  for _ in range(reps)))
        print(f"  {i + 1:2d}: continue_step {per['continue_step'][0][-1]:6.1f} ms {per['continue_step'][1][-1]:6.1f} kB"
              f" (decode {per['decode'][0][-1]:5.1f} ms); history_back {per['history_back'][0][-1]:5.1f} ms "
              f"{per['history_back'][1][-1]:6.1f} kB", flush=True)
    app.close()
    st = {a: (stats(t), stats(kb) if kb else None) for a, (t, kb) in per.items()}
    figures = branch_figures(st, per, cpu)
    return entry(figures, model=f"{cfg.checkpoint}, in the app with every model of {cfg.app_root.name}/",
                 data=f"first {len(texts)} lines of Multi30k test_2016_flickr.{name.split('-')[0]}",
                 method="in process, Blocks.process_api per event, one session per sentence; the branch at step "
                        f"{STEP} with the model's second candidate; decode alone: median of {reps} uncached",
                 ms={a: s[0] for a, s in st.items()}, kb={a: s[1] for a, s in st.items() if s[1]})


if __name__ == "__main__":
    raise SystemExit(standalone("branch", run))
