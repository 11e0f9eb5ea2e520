"""Render every page of the built documentation site in headless Chromium at a 1280 px
wide window and fail on what a reader would see broken:

- a code or output block cut off: a block (pre, a highlighted code block, a gallery
  output block, a table) whose content is wider than its box (scrollWidth >
  clientWidth) while neither it nor an ancestor scrolls sideways (overflow-x auto or
  scroll), or whose box reaches past the window's right edge;
- the page itself wider than the window (a horizontal scroll bar for the whole page);
- a broken image: an <img> that finished loading with naturalWidth 0.

Usage: python .ci/docs_browser_check.py HTML_DIR [--width 1280] [--height 900]
(it first checks itself on pages with planted faults, which it must report).
Needs Chromium and its driver (Debian: apt-get install chromium chromium-driver) and
selenium (pip install selenium); the driver is taken from PATH (CHROMEDRIVER=path to
override) and nothing is downloaded. Exit status 1 lists each problem with its page.
"""
import argparse
import functools
import http.server
import os
import shutil
import sys
import threading

# runs in the page: returns a list of problems (strings)
CHECK_JS = r"""
const problems = [];
const viewW = document.documentElement.clientWidth;
const scrolls = el => ['auto', 'scroll'].includes(getComputedStyle(el).overflowX);
const clips = el => ['hidden', 'clip'].includes(getComputedStyle(el).overflowX);
function label(el) {
  const text = (el.innerText || '').trim().split('\n')[0].slice(0, 60);
  const cls = typeof el.className === 'string' && el.className ? '.' + el.className.split(' ')[0] : '';
  return el.tagName.toLowerCase() + cls + ' "' + text + '"';
}
const blocks = document.querySelectorAll(
  'pre, div.highlight, .sphx-glr-script-out, table, div.math, .MathJax_Display');
for (const el of blocks) {
  const r = el.getBoundingClientRect();
  if (r.width === 0 || r.height === 0) continue;              // not displayed
  if (scrolls(el)) {                                         // wide content scrolls
    if (el.scrollWidth > el.clientWidth + 1) window.__attnxScrolling = (window.__attnxScrolling || 0) + 1;
    continue;
  }
  if (el.scrollWidth > el.clientWidth + 1 && clips(el)) {
    problems.push('cut off (content ' + el.scrollWidth + ' px in a ' + el.clientWidth +
                  ' px box that hides the rest): ' + label(el));
    continue;
  }
  // where its content ends, and whether an ancestor scrolls to it or hides it
  const right = r.left + Math.max(el.scrollWidth, r.width);
  let held = false;
  for (let a = el.parentElement; a && a !== document.documentElement; a = a.parentElement) {
    if (scrolls(a)) { held = true; break; }
    const ar = a.getBoundingClientRect();
    if (clips(a) && right > ar.right + 1) {
      problems.push('cut off at ' + Math.round(ar.right) + ' px by ' + label(a).split(' ')[0] +
                    ' (content ends at ' + Math.round(right) + ' px): ' + label(el));
      held = true;
      break;
    }
  }
  if (!held && right > viewW + 1) {
    problems.push('past the right edge of the ' + viewW + ' px window (ends at ' +
                  Math.round(right) + ' px): ' + label(el));
  }
}
if (document.documentElement.scrollWidth > viewW + 1) {
  problems.push('the page is ' + document.documentElement.scrollWidth + ' px wide in a ' +
                viewW + ' px window');
}
for (const img of document.images) {
  if (img.complete && img.naturalWidth === 0) {
    problems.push('broken image: ' + img.getAttribute('src'));
  } else if (!img.complete) {
    problems.push('image not loaded: ' + img.getAttribute('src'));
  }
}
return [problems, window.__attnxScrolling || 0];
"""

# lazy images below the fold load only when scrolled to: load them all first
EAGER_JS = r"""
const done = arguments[arguments.length - 1];
const imgs = Array.from(document.images);
for (const img of imgs) { if (img.loading === 'lazy') { img.loading = 'eager'; } }
Promise.all(imgs.map(img => img.complete ? null :
  new Promise(res => { img.addEventListener('load', res); img.addEventListener('error', res); })))
  .then(() => done(true));
"""


def pages(root):
    for folder, dirs, files in os.walk(root):
        dirs[:] = sorted(d for d in dirs if not d.startswith(("_", ".")))
        for name in sorted(files):
            if name.endswith(".html"):
                yield os.path.relpath(os.path.join(folder, name), root)


def serve(root):
    """An HTTP server for root on a free local port (a thread); returns (server, url)."""
    class Quiet(http.server.SimpleHTTPRequestHandler):
        def log_message(self, *args):
            pass

    handler = functools.partial(Quiet, directory=root)
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server, f"http://127.0.0.1:{server.server_address[1]}/"


def browser(width, height):
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    opts = webdriver.ChromeOptions()
    for arg in ("--headless=new", "--no-sandbox", "--disable-dev-shm-usage", "--disable-gpu",
                f"--window-size={width},{height}", "--hide-scrollbars",
                "--force-device-scale-factor=1"):
        opts.add_argument(arg)
    binary = os.environ.get("CHROMIUM") or shutil.which("chromium") or shutil.which(
        "chromium-browser") or shutil.which("google-chrome")
    driver_path = os.environ.get("CHROMEDRIVER") or shutil.which("chromedriver")
    if not binary or not driver_path:
        raise SystemExit("docs browser check: needs chromium and chromedriver on PATH "
                         "(Debian: apt-get install chromium chromium-driver)")
    opts.binary_location = binary
    return webdriver.Chrome(service=Service(executable_path=driver_path), options=opts)


SELF_TEST = {
    "clipped.html": ('<div style="width:300px;overflow:hidden"><pre style="overflow:visible">'
                     + "x" * 200 + "</pre></div>", "cut off at"),
    "hidden.html": ('<pre style="width:300px;overflow:hidden">' + "y" * 200 + "</pre>",
                    "box that hides the rest"),
    "edge.html": ('<pre style="width:2000px">' + "z" * 10 + "</pre>", "past the right edge"),
    "image.html": ('<img src="missing.png" alt="missing">', "broken image: missing.png"),
    "fine.html": ('<pre style="width:300px;overflow-x:auto">' + "w" * 200 + "</pre>"
                  '<img src="ok.svg">', None),
}


def self_test(width, height):
    """Pages with one fault each (and one without): the check must find exactly those."""
    import tempfile
    with tempfile.TemporaryDirectory() as root:
        for name, (body, _) in SELF_TEST.items():
            with open(os.path.join(root, name), "w") as f:
                f.write(f"<!doctype html><html><body style='margin:0'>{body}</body></html>")
        with open(os.path.join(root, "ok.svg"), "w") as f:
            f.write('<svg xmlns="http://www.w3.org/2000/svg" width="10" height="10"/>')
        found, _, _ = check(root, width, height)
    wrong = []
    for name, (_, expect) in SELF_TEST.items():
        got = found.get(name, [])
        if expect is None and got or expect is not None and not any(expect in g for g in got):
            wrong.append(f"{name}: expected {expect!r}, got {got}")
    if wrong:
        raise SystemExit("docs browser check: the self-test failed:\n" + "\n".join(wrong))
    print(f"docs browser check: self-test found the {len(SELF_TEST) - 1} planted faults")


def check(root, width, height):
    """({page: [problem, ...]}, number of pages, wide blocks that scroll)."""
    todo = list(pages(root))
    if not todo:
        raise SystemExit(f"docs browser check: no .html pages under {root}")
    server, url = serve(root)
    driver = browser(width, height)
    failures = {}
    scrolling = 0
    try:
        driver.set_page_load_timeout(60)
        driver.set_script_timeout(30)
        inner = driver.execute_script("return window.innerWidth")
        if inner != width:
            driver.set_window_size(width + (width - inner), height)
        for page in todo:
            driver.get(url + page.replace(os.sep, "/"))
            driver.execute_async_script(EAGER_JS)
            problems, n_scrolling = driver.execute_script(CHECK_JS)
            scrolling += n_scrolling
            if problems:
                failures[page] = problems
        got = driver.execute_script("return window.innerWidth")
        if got != width:
            raise SystemExit(f"docs browser check: the window is {got} px wide, not {width}")
    finally:
        driver.quit()
        server.shutdown()
    return failures, len(todo), scrolling


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("html_dir")
    ap.add_argument("--width", type=int, default=1280)
    ap.add_argument("--height", type=int, default=900)
    args = ap.parse_args(argv)
    self_test(args.width, args.height)
    failures, n_pages, scrolling = check(os.path.abspath(args.html_dir), args.width, args.height)
    for page, problems in failures.items():
        for p in problems:
            print(f"{page}: {p}")
    n_bad = sum(len(p) for p in failures.values())
    print(f"docs browser check: {n_pages} pages at {args.width} px, "
          f"{n_bad} problems on {len(failures)} pages ({scrolling} wide blocks scroll "
          "sideways, which is fine)")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
