// Offline use: every same-origin GET goes to the network first (through the browser's HTTP cache) and its
// answer is kept; with no network, the kept copy answers. The page's shell is kept at install.
const CACHE = "explorer-static-v2";
const SHELL = ["./", "index.html", "style.css", "app.js", "engine.js", "spm.js", "words.js", "text.js", "views.js", "tour.js", "player.js", "masks.js", "figures.json",
  "vendor/ort.wasm.min.mjs", "vendor/ort-wasm-simd-threaded.mjs", "vendor/ort-wasm-simd-threaded.wasm",
  "vendor/plotly.min.js", "models/manifest.json"];

self.addEventListener("install", (e) => {
  self.skipWaiting();
  e.waitUntil(caches.open(CACHE).then((c) => c.addAll(SHELL)));
});

self.addEventListener("activate", (e) => e.waitUntil(self.clients.claim()));

self.addEventListener("fetch", (e) => {
  if (e.request.method !== "GET" || new URL(e.request.url).origin !== self.location.origin) return;
  e.respondWith(fetch(e.request).then((r) => {
    if (r.ok) { const copy = r.clone(); caches.open(CACHE).then((c) => c.put(e.request, copy)); }
    return r;
  }).catch(async () => (await caches.match(e.request, { ignoreSearch: true })) ?? Response.error()));
});
