"""The Gradio sections of the explorer. Only this package and app.py import gradio.

- ``calls``: the model calls (wrapped in ``spaces.GPU`` where models run on a ZeroGPU GPU) and the
  loaded checkpoints;
- ``state``: what one session keeps (the current run, a comparison, the selected head);
- ``present``: text, labels, links and payloads (no gradio);
- ``views``: figures of a run, assembled with ``viz/`` (no gradio);
- ``sections/``: one module per top-level section, its layout and its handlers together;
- ``api``: the JSON endpoints.
"""
