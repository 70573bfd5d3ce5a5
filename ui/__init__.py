"""The Gradio sections of the explorer. Only this package and app.py import gradio.

- ``calls``: the model calls (wrapped in ``spaces.GPU`` where models run on a ZeroGPU GPU) and the
  loaded checkpoints;
- ``state``: what one session keeps (the current run, a comparison, the selected head);
- ``present/``: the presenters, no gradio: text and labels (the package itself), figures of a run
  (``views``, assembled with ``viz/``), the tour, Watch it learn, payloads and links;
- ``sections/``: one module per top-level section, its layout and its handlers together;
- ``api``: the JSON endpoints.
"""
