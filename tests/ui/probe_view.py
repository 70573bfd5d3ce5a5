"""A view made for the mount test, defined in this one file: what it reads, its own control, its outputs
and how it is drawn. Nothing else in the app names it."""
from __future__ import annotations

from ui.present.views import Control, Out, attention_figure, view

# the test switches it on to see the one error figure
BROKEN = {"now": False}


def draw(run, sel, env, weights="shared"):
    if BROKEN["now"]:
        raise RuntimeError("the probe view is broken on purpose")
    return attention_figure(run, sel.head_ref, "head", "words", env.lm, weights)


VIEW = view("analysis", "probe", "kind layer head", draw, label="Probe",
            controls=(Control("weights", "radio", "shared", ("shared", "head"), "Colour scale"),),
            outputs=(Out("plot", elem_id="probe-plot"),), api_name="probe_view")
