// The model at a glance, in the app's words (ui/present MODEL_PARTS, exported in tour.json): the encoder and the
// decoder, their parts in the order a sentence meets them, with this model's own sizes; a part with a view opens it.
import { fill } from "./tour.js";

const el = (tag, props = {}) => Object.assign(document.createElement(tag), props);

/** ``root`` filled for a model of ``meta``'s sizes; ``open(view)`` is called with a part's view when picked. */
export function drawOverview(root, texts, meta, open) {
  const sizes = { encoder: { layers: meta.encoder_layers, heads: meta.encoder_heads },
    decoder: { layers: meta.decoder_layers, heads: meta.decoder_heads } };
  root.replaceChildren(...Object.entries(texts).map(([stack, { title, parts }]) => {
    const list = el("ol");
    for (const [view, words] of parts) {
      const text = fill(words, sizes[stack]), item = el("li");
      if (view) {
        const b = el("button", { type: "button", className: "part", textContent: text });
        b.dataset.view = view;
        b.addEventListener("click", () => open(view));
        item.append(b);
      } else item.textContent = text;
      list.append(item);
    }
    const box = el("div", { className: `stack ${stack}` });
    box.append(el("h3", { textContent: fill(title, sizes[stack]) }), list);
    return box;
  }));
}
