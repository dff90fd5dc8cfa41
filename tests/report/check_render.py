#!/usr/bin/env python3
"""Renders an `autotune report --html` page in headless Chromium and checks what a
person would see (ctest: report_html_renders).

    check_render.py AUTOTUNE_CLI FIXTURE_DB OUT_DIR
    check_render.py --page PAGE.html OUT_DIR     (a page written elsewhere, e.g. the
                                                 benchmark report in bench/results/)

1. Writes the page of FIXTURE_DB with the CLI (or takes PAGE.html as it is).
2. A control page with a script error and a blocked fetch must produce console
   messages in Chromium's log: proof that the log check below can see errors at all.
3. Renders the report with --screenshot and with --dump-dom, Chromium's log on stderr.
   The page has no script and a Content-Security-Policy of default-src 'none', so any
   console message (a script error, a refused fetch) fails the test.
4. The screenshot must be a PNG of the window's size that is not blank: several
   colours, a share of non-white pixels, the chart colours among them.
5. The rendered DOM must hold every shape's heading (each measured problem of the
   database; with --page, each heading of the file) and every chart.

Chromium is Debian's `chromium` (scripts/setup-debian.sh installs it when CI=true).
Without it the test fails when CI=true and is skipped (exit 77) elsewhere. Every run
is bounded by a timeout; --no-sandbox because CI runs as root.
"""
import html
import os
import re
import shutil
import sqlite3
import struct
import subprocess
import sys
import zlib

SKIP = 77
WIDTH, HEIGHT = 1280, 2400
TIMEOUT_S = 90
# A console message in Chromium's log (--enable-logging=stderr --v=0), e.g.
# [..:INFO:CONSOLE:1] "Uncaught ReferenceError: f is not defined", source: file://...
CONSOLE = re.compile(r":CONSOLE(?::|\()\d*\)?\]|Uncaught ")
# The report's chart colours (tuner/report_html.cpp): winner bars and OK outcomes.
WINNER_RGB = (0xEE, 0x77, 0x33)
OK_RGB = (0x22, 0x88, 0x33)


def fail(message):
    print(f"check_render: FAIL: {message}", file=sys.stderr)
    sys.exit(1)


def find_chromium():
    for name in ("chromium", "chromium-browser", "google-chrome"):
        path = shutil.which(name)
        if path:
            return path
    return None


def run_chromium(chromium, url, out_dir, tag, extra):
    """Runs headless Chromium on url; returns (stdout, stderr)."""
    profile = os.path.join(out_dir, f"profile-{tag}")
    # --disable-dev-shm-usage: containers often give /dev/shm a few MB only.
    cmd = [chromium, "--headless", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
           "--no-first-run",
           "--disable-extensions", "--disable-background-networking", "--hide-scrollbars",
           "--enable-logging=stderr", "--v=0", f"--user-data-dir={profile}",
           f"--window-size={WIDTH},{HEIGHT}"] + extra + [url]
    try:
        done = subprocess.run(cmd, capture_output=True, text=True, errors="replace",
                              timeout=TIMEOUT_S)
    except subprocess.TimeoutExpired:
        fail(f"chromium did not finish in {TIMEOUT_S} s: {' '.join(cmd)}")
    with open(os.path.join(out_dir, f"chromium-{tag}.log"), "w") as log:
        log.write(done.stderr)
    if done.returncode != 0:
        fail(f"chromium exited {done.returncode} on {url}:\n{done.stderr[-3000:]}")
    return done.stdout, done.stderr


def console_lines(log):
    return [line for line in log.splitlines() if CONSOLE.search(line)]


def read_png(path):
    """(width, height, rows of (r, g, b) tuples) of an 8-bit RGB/RGBA PNG."""
    with open(path, "rb") as f:
        data = f.read()
    if data[:8] != b"\x89PNG\r\n\x1a\n":
        fail(f"{path} is not a PNG")
    pos, idat, header = 8, [], None
    while pos < len(data):
        length, kind = struct.unpack(">I4s", data[pos:pos + 8])
        body = data[pos + 8:pos + 8 + length]
        if kind == b"IHDR":
            header = struct.unpack(">IIBBBBB", body)
        elif kind == b"IDAT":
            idat.append(body)
        pos += 12 + length
    width, height, depth, colour, _, _, interlace = header
    if depth != 8 or colour not in (2, 6) or interlace != 0:
        fail(f"{path}: unexpected PNG format (depth {depth}, colour type {colour})")
    bpp = 3 if colour == 2 else 4
    raw = zlib.decompress(b"".join(idat))
    stride = width * bpp
    rows, prev = [], bytearray(stride)
    for y in range(height):
        kind = raw[y * (stride + 1)]
        line = bytearray(raw[y * (stride + 1) + 1:(y + 1) * (stride + 1)])
        for i in range(stride):
            a = line[i - bpp] if i >= bpp else 0
            b = prev[i]
            c = prev[i - bpp] if i >= bpp else 0
            if kind == 1:
                line[i] = (line[i] + a) & 0xFF
            elif kind == 2:
                line[i] = (line[i] + b) & 0xFF
            elif kind == 3:
                line[i] = (line[i] + (a + b) // 2) & 0xFF
            elif kind == 4:
                p = a + b - c
                pa, pb, pc = abs(p - a), abs(p - b), abs(p - c)
                line[i] = (line[i] + (a if pa <= pb and pa <= pc else b if pb <= pc else c)) & 0xFF
        rows.append([tuple(line[x * bpp:x * bpp + 3]) for x in range(width)])
        prev = line
    return width, height, rows


def main():
    args = sys.argv[1:]
    if len(args) != 3:
        print(__doc__, file=sys.stderr)
        return 2
    given_page = args[1] if args[0] == "--page" else None
    out_dir = args[2]
    chromium = find_chromium()
    if not chromium:
        message = "chromium is not installed (apt-get install chromium; scripts/setup-debian.sh does when CI=true)"
        if os.environ.get("CI", "").lower() in ("1", "true", "yes"):
            fail(message)
        print(f"check_render: SKIP: {message}")
        return SKIP
    os.makedirs(out_dir, exist_ok=True)
    page = os.path.abspath(given_page) if given_page else os.path.join(out_dir, "report.html")
    shot = os.path.join(out_dir, "report.png")
    for path in (shot,) if given_page else (page, shot):
        if os.path.exists(path):
            os.remove(path)

    if given_page:
        if not os.path.isfile(page):
            fail(f"{page} does not exist")
        with open(page, encoding="utf-8") as f:
            source = f.read()
        # The page's own headings, in the form --dump-dom writes them (& < > escaped).
        headings = [html.escape(html.unescape(h), quote=False)
                    for h in re.findall(r"<h3>(.*?)</h3>", source)]
        charts = source.count("<svg ")
    else:
        cli, fixture = args[0], args[1]
        done = subprocess.run([cli, "report", "--html", page, "--db", fixture, "--copy-gbps",
                               "2860", "--peak-tflops", "660"],
                              capture_output=True, text=True, timeout=60)
        if done.returncode != 0:
            fail(f"autotune report --html exited {done.returncode}:\n{done.stdout}{done.stderr}")
        shapes = sqlite3.connect(f"file:{fixture}?immutable=1", uri=True).execute(
            "SELECT DISTINCT op, problem FROM results").fetchall()
        headings = [html.escape(op + " " + problem, quote=False) for op, problem in shapes]
        charts = len(shapes) + len({op for op, _ in shapes})  # one per shape and per op
    if not headings:
        fail(f"{page} has no shape to render")
    # Without a script the page cannot log a refused fetch unless its policy refuses it:
    # the policy is what turns any external reference into a console message below.
    with open(page, encoding="utf-8") as f:
        if "Content-Security-Policy\" content=\"default-src 'none';" not in f.read():
            fail(f"{page} lacks the Content-Security-Policy default-src 'none'")

    # The control: this Chromium's log must show a script error and a refused fetch.
    control = os.path.join(out_dir, "control.html")
    with open(control, "w") as f:
        f.write("<!DOCTYPE html><html><head><meta charset=\"utf-8\"><meta http-equiv="
                "\"Content-Security-Policy\" content=\"default-src 'none'; script-src "
                "'unsafe-inline'\"><title>control</title></head><body><p>control</p>"
                "<img src=\"https://example.invalid/x.png\"><script>no_such_function();"
                "</script></body></html>")
    _, log = run_chromium(chromium, "file://" + control, out_dir, "control",
                          [f"--screenshot={os.path.join(out_dir, 'control.png')}"])
    seen = console_lines(log)
    if not any("no_such_function" in line for line in seen) or not any(
            "example.invalid" in line for line in seen):
        fail("Chromium's log does not show the control page's script error and refused fetch, "
             f"so it cannot vouch for the report page; console lines: {seen}")

    _, log = run_chromium(chromium, "file://" + page, out_dir, "screenshot",
                          [f"--screenshot={shot}"])
    errors = console_lines(log)
    dom, log_dom = run_chromium(chromium, "file://" + page, out_dir, "dom", ["--dump-dom"])
    errors += console_lines(log_dom)
    if errors:
        fail("the report page logged console messages:\n" + "\n".join(errors))

    width, height, rows = read_png(shot)
    if (width, height) != (WIDTH, HEIGHT):
        fail(f"screenshot is {width}x{height}, expected {WIDTH}x{HEIGHT}")
    colours = {}
    for row in rows[::4]:
        for pixel in row[::4]:
            colours[pixel] = colours.get(pixel, 0) + 1
    total = sum(colours.values())
    background = max(colours.values())
    if len(colours) < 16 or background > 0.97 * total:
        fail(f"screenshot looks blank: {len(colours)} colours, {100 * background / total:.1f}% "
             "one colour")
    for name, rgb in (("winner", WINNER_RGB), ("OK outcome", OK_RGB)) if not given_page else ():
        if not any(all(abs(p - q) <= 8 for p, q in zip(pixel, rgb)) for pixel in colours):
            fail(f"no {name} colour #{''.join(f'{c:02X}' for c in rgb)} in the screenshot")

    # Every shape's heading and every chart survived into the rendered DOM (--dump-dom
    # escapes & < > in text, nothing else).
    for heading in headings:
        if f"<h3>{heading}</h3>" not in dom:
            fail(f"the rendered page lacks the shape {html.unescape(heading)}")
    if dom.count("<svg") != charts:
        fail(f"the rendered page has {dom.count('<svg')} charts, expected {charts}")
    print(f"check_render: OK: {len(headings)} shapes and {charts} charts rendered, "
          f"{len(colours)} colours, no console messages; {shot}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
