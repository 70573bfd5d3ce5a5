// One link for both editions: the app's link keys (ui/state.py to_query / from_query) read and written here.
// The page shows text, model, tour, kind, layer and head; it still reads its old src and dir; every other
// key is the app's alone, and the page says so with the same link to the app.

const APP_KIND = { enc: "enc", self: "dec", cross: "cross" };  // the page's kind -> the link's (SHORT_NAMES)
const PAGE_KIND = { enc: "enc", dec: "self", cross: "cross", self: "self", encoder: "enc", decoder: "self" };  // Kind.of's names
const SHOWN = new Set(["text", "model", "tour", "kind", "layer", "head", "temperature", "top_k", "seed"]);  // the last three: the step player's
const OLD = { src: "text", dir: "model" };

export const pageKind = (kind) => PAGE_KIND[kind] ?? null;

/** What the page can show of a link: {text, model, kind (null: none named), layer, head, tour}. */
export function fromQuery(q, nStops) {
  const int = (key, lo, hi) => {
    const v = q.get(key);
    return v !== null && /^\d+$/.test(v) && +v >= lo && +v <= hi ? Number(v) : null;
  };
  const named = q.has("kind") || q.has("layer") || q.has("head");
  return { text: q.get("text") ?? q.get("src"), model: q.get("model") ?? q.get("dir"),
    kind: named ? (pageKind(q.get("kind")) ? q.get("kind") : "cross") : null,
    layer: int("layer", 0, 999) ?? 0, head: int("head", 0, 999) ?? 0, tour: int("tour", 1, nStops) };
}

/** The link's keys the page does not show (kept as they are, so that the link still opens them in the app). */
export function unshown(q) {
  return new URLSearchParams([...q].filter(([k]) => !SHOWN.has(k) && !(k in OLD)));
}

/** The page's screen ({text, model, kind (the page's), layer, head, tour}) as the app writes a link: defaults
 * left out (kind cross, layer 0, head 0, no tour), then ``extra`` (keys only the app shows). */
export function toQuery(s, extra = new URLSearchParams()) {
  const q = new URLSearchParams({ text: s.text, model: s.model });
  const kind = APP_KIND[s.kind] ?? "cross";
  if (kind !== "cross") q.set("kind", kind);
  if (s.layer) q.set("layer", String(s.layer));
  if (s.head) q.set("head", String(s.head));
  if (s.tour) q.set("tour", String(s.tour));
  if (s.tpick) q.set("tpick", String(s.tpick));  // the tour stop's "Try it" pick
  for (const [k, v] of extra) q.set(k, v);
  return q;
}

/** The same screen in the app at ``base``: a link's own query, or the page's screen written as one. */
export function appLink(base, q) {
  const query = q instanceof URLSearchParams ? new URLSearchParams([...q].map(([k, v]) => [OLD[k] ?? k, v])) : toQuery(q);
  return `${base.split("?")[0].split("#")[0]}?${query}`;
}
