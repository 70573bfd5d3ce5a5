"""What the web tests share: the site built once per session and served on 127.0.0.1 (web/serve.py), and
the hard strings the tokenizer must get right. Imported by the web tests (this module holds no tests)."""
from web.serve import (ROOT, chromium, guard, isolated_chromium, lines, nginx_server, open_site, site,  # noqa: F401
                       space, static_server, watch)

HARD_STRINGS = ["Ein Hund 🐕 läuft 🏃‍♂️ über die Wiese 👍🏽.", "一只狗在草地上奔跑。", "Собака бежит по траве.",
                "Cafe\u0301 cre\u0300me bru\u0302le\u0301e", "ä" * 700 + " Hund " * 200 + "x" * 300,
                "<b>Ein</b> Hund & <script>alert(1)</script>", "  zwei   Leerzeichen\tund\u00a0Tab  ",
                "don't stop-and-go (U.S.) e.g. l'homme aujourd'hui z.B. usw. 3.5km 10% $5 http://a.example/b?c=d"]
