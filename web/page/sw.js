// Offline use, and no file fetched twice. The build lists every file of the site with a hash of its content
// (web/build.py writes FILES below); a listed file is kept under its hash and answered from the cache from
// then on (cache first); the page's HTML goes to the network first, so that a new build is seen at once. A
// file the page fetched before this worker took over is copied from the browser's HTTP cache, not downloaded
// again, and its copy is kept only if its content has the listed hash.
const FILES = {};  // path relative to this file -> content hash (sha-256, hex, first 16); the build fills it
const CACHE = "explorer-files";
const SHELL = ["index.html", "style.css", "app.js", "engine.js", "spm.js", "words.js", "text.js", "views.js", "tour.js",
  "player.js", "masks.js", "stops.js", "link.js", "models.js", "marian.js", "unigram.js", "figures.json", "tour.json", "vendor/plotly.min.js", "models/manifest.json"];  // the first screen's; models and ONNX Runtime come when used
const scope = new URL("./", self.location.href).href;
const pending = new Map();  // cache key -> Promise of the kept response (two asks, one download)

// what a kept copy keeps of the response's headers: its type, and the isolation headers without which an
// isolated page may not start a worker from it (ONNX Runtime's threads)
const KEPT = ["content-type", "cross-origin-embedder-policy", "cross-origin-opener-policy", "cross-origin-resource-policy"];
const keptHeaders = (h) => Object.fromEntries(KEPT.filter((k) => h.has(k)).map((k) => [k, h.get(k)]));
const keyOf = (path) => `${scope}${path}?v=${FILES[path]}`;
const hex = (buf) => Array.from(new Uint8Array(buf), (b) => b.toString(16).padStart(2, "0")).join("");

async function contentHash(body) {
  return hex(await crypto.subtle.digest("SHA-256", body)).slice(0, 16);
}

/** The listed file ``path``: from the cache, else fetched (the HTTP cache's copy if it has one) and sent on
 * as it arrives, while a copy is kept if its content has the listed hash. A second ask meanwhile waits for
 * that copy instead of downloading again. ``keep``: the copy's promise goes to the event's waitUntil. */
async function listed(path, keep = () => {}) {
  const key = keyOf(path);
  const cache = await caches.open(CACHE);
  const hit = await cache.match(key);
  if (hit) return hit;
  if (pending.has(key)) return (await pending.get(key)).clone();
  let send;
  const kept = new Promise((ok) => { send = ok; }).then(async (r) => {
    const body = await r.arrayBuffer();
    const out = new Response(body, { headers: keptHeaders(r.headers) });
    if (await contentHash(body) === FILES[path]) await cache.put(key, out.clone());
    return out;  // a stale copy from the HTTP cache is not kept: the next ask downloads the file
  });
  pending.set(key, kept);  // before the first byte: an ask from now on waits for this download
  kept.finally(() => pending.delete(key)).catch(() => {});
  keep(kept.catch(() => null));
  try {
    const r = await fetch(scope + path, { cache: "force-cache" });
    if (!r.ok || !r.body) { send(Promise.reject(new Error(`${path}: ${r.status}`))); return r; }
    const [mine, theirs] = r.body.tee();
    send(new Response(theirs, { headers: r.headers }));
    return new Response(mine, { headers: r.headers });
  } catch (e) {
    send(Promise.reject(e));
    throw e;
  }
}

async function networkFirst(request) {
  const cache = await caches.open(CACHE);
  try {
    const r = await fetch(request);
    if (r.ok) await cache.put(scope + "index.html", r.clone());
    return r;
  } catch {
    return (await cache.match(scope + "index.html")) ?? Response.error();
  }
}

self.addEventListener("install", (e) => {
  self.skipWaiting();
  const copies = [fetch(scope + "index.html", { cache: "force-cache" }).then(async (r) => {
    if (r.ok) await (await caches.open(CACHE)).put(scope + "index.html", r);  // for a reload with no network
  }).catch(() => null)];
  e.waitUntil(Promise.all(SHELL.filter((p) => p in FILES && p !== "index.html")
    .map((p) => listed(p, (k) => copies.push(k)).catch(() => null))).then(() => Promise.all(copies)));
});

self.addEventListener("activate", (e) => e.waitUntil((async () => {
  const cache = await caches.open(CACHE);
  const wanted = new Set(Object.keys(FILES).map(keyOf));
  for (const req of await cache.keys()) if (!wanted.has(req.url) && req.url !== scope + "index.html") await cache.delete(req);
  await caches.delete("explorer-static-v2");  // the copies of the previous worker, which fetched network first
  await self.clients.claim();
})()));

self.addEventListener("fetch", (e) => {
  const url = new URL(e.request.url);
  if (e.request.method !== "GET" || url.origin !== self.location.origin || !url.href.startsWith(scope)) return;
  const path = url.href.slice(scope.length).split(/[?#]/)[0];
  if (e.request.mode === "navigate" || path === "" || path === "index.html") return e.respondWith(networkFirst(e.request));
  if (path in FILES && !url.search) e.respondWith(listed(path, (k) => e.waitUntil(k)));
});
