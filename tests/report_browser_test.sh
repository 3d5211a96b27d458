#!/usr/bin/env bash
# The HTML report (report/html_report.h) in a real browser. The real `octopipe plan --report`
# writes the page of a small example; Debian's chromium, headless, loads it twice: --dump-dom
# (the DOM after the page's script ran) and --screenshot (its pixels, decoded here with zlib).
# Checks:
#   1. the browser logs no console message and no uncaught error (the page's script writes to
#      the console only when its own check of the timelines fails);
#   2. the DOM: the script's ready mark, one row per device and, in each row, one op element
#      per op of that device in the plan `--json` printed (same ops, same order), the memory
#      bars, the stage rows; for a layout, every pipeline's replicas; and `simulate --report`
#      of the layout's plan file draws every pipeline too;
#   3. the pixels: inside the first timeline, where html_report.h's geometry puts it (the
#      constants are read from that header), the forward and backward colours the DOM uses
#      cover a good part of the plot.
# Also: both commands' --help list --report, and an unwritable --report is refused before any
# tuning, naming the flag and the path. Without chromium the test FAILS (tools/setup.sh
# installs it); it never skips.
set -uo pipefail
bin="$1" model="$2" cluster="$3" header="$4"
tmp="${TEST_TMPDIR:-$(mktemp -d)}"
fail=0
die() { echo "FAIL: $*"; exit 1; }

browser="$(command -v chromium || command -v chromium-browser || true)"
[ -n "$browser" ] || die "chromium is not installed: run tools/setup.sh (Debian package chromium)"

# --help and the early refusal.
for cmd in plan simulate; do
  "$bin" "$cmd" --help >"$tmp/help" 2>&1 || die "$cmd --help failed"
  grep -q -- "--report" "$tmp/help" || { echo "FAIL: $cmd --help lacks --report"; fail=1; }
done
bad="$tmp/no/such/dir/page.html"
"$bin" plan --model="$model" --cluster="$cluster" --devices=4 --report="$bad" \
  >"$tmp/out" 2>"$tmp/err"
code=$?
want="octopipe plan: error: --report: cannot write '$bad': No such file or directory"
if [ "$code" != 2 ] || [ "$(cat "$tmp/err")" != "$want" ]; then
  echo "FAIL unwritable --report: exit $code, stderr (want exactly '$want'):"; cat "$tmp/err"
  fail=1
fi

# The pages: one pipeline over 4 devices, and a layout (PP x TP x DP) over the whole cluster.
"$bin" plan --model="$model" --cluster="$cluster" --devices=4 --microbatches=16 \
  --time_budget=2 --json --report="$tmp/plan.html" >"$tmp/plan.json" 2>"$tmp/plan.err" ||
  { cat "$tmp/plan.err"; die "octopipe plan --report failed"; }
"$bin" plan --model="$model" --cluster="$cluster" --microbatches=16 --time_budget=2 --json \
  --report="$tmp/layout.html" --out="$tmp/layout-plan.json" \
  >"$tmp/layout.json" 2>"$tmp/layout.err" ||
  { cat "$tmp/layout.err"; die "octopipe plan --report (layout) failed"; }
"$bin" simulate --model="$model" --cluster="$cluster" --plan="$tmp/layout-plan.json" \
  --report="$tmp/sim.html" >"$tmp/sim.out" 2>"$tmp/sim.err" ||
  { cat "$tmp/sim.err"; die "octopipe simulate --plan --report failed"; }
for page in plan layout sim; do
  [ -s "$tmp/$page.html" ] || die "no report written at $tmp/$page.html"
  if grep -Eq '(src|href)=' "$tmp/$page.html"; then
    echo "FAIL $page.html refers to another file or URL"; fail=1
  fi
done

# Headless chromium with its own profile and home inside the test's directory.
run_browser() {  # run_browser LOG ARGS...
  local log="$1"; shift
  HOME="$tmp/home" XDG_CONFIG_HOME="$tmp/home/.config" XDG_CACHE_HOME="$tmp/home/.cache" \
    timeout 120 "$browser" --headless --no-sandbox --disable-gpu --hide-scrollbars \
    --force-color-profile=srgb --no-first-run --user-data-dir="$tmp/profile" \
    --enable-logging=stderr --v=0 "$@" 2>"$log"
}
mkdir -p "$tmp/home"
for page in plan layout sim; do
  run_browser "$tmp/dom-$page.log" --dump-dom "file://$tmp/$page.html" >"$tmp/$page.dom" ||
    { tail -20 "$tmp/dom-$page.log"; die "chromium --dump-dom of $page.html failed"; }
done
rm -f "$tmp/plan.png"
run_browser "$tmp/shot.log" --screenshot="$tmp/plan.png" --window-size=1400,900 \
  "file://$tmp/plan.html" >/dev/null ||
  { tail -20 "$tmp/shot.log"; die "chromium --screenshot failed"; }
[ -s "$tmp/plan.png" ] || { tail -20 "$tmp/shot.log"; die "chromium wrote no screenshot"; }

# 1. The console.
if grep -E 'CONSOLE|Uncaught' "$tmp"/dom-*.log "$tmp/shot.log"; then
  echo "FAIL: the page wrote to the browser's console (above)"; fail=1
fi

# 2 and 3: the DOM and the pixels.
python3 - "$tmp" "$header" <<'EOF' || fail=1
import json, re, struct, sys, zlib
from html.parser import HTMLParser

tmp, header = sys.argv[1], sys.argv[2]
errors = []


class Dom(HTMLParser):
    """Timelines (by id), their rows' ops, memory bars, stage and replica rows, body marks."""

    def __init__(self):
        super().__init__()
        self.body, self.timelines, self.svg, self.row = {}, {}, None, None
        self.counts = {'mem-bar': 0, 'stage-row': 0, 'replica-row': 0}

    def handle_starttag(self, tag, attrs):
        a = dict(attrs)
        classes = (a.get('class') or '').split()
        if tag == 'body':
            self.body = a
        elif tag == 'svg' and 'timeline' in classes:
            self.svg = {'attrs': a, 'rows': []}
            self.timelines[a.get('id')] = self.svg
        elif tag == 'g' and 'device-row' in classes and self.svg is not None:
            self.row = []
            self.svg['rows'].append(self.row)
        elif tag == 'rect' and 'op' in classes and self.row is not None:
            self.row.append(a)
        for c in self.counts:
            if c in classes:
                self.counts[c] += 1

    def handle_endtag(self, tag):
        if tag == 'svg':
            self.svg, self.row = None, None
        elif tag == 'g':
            self.row = None


def parse(name):
    dom = Dom()
    with open(f'{tmp}/{name}.dom') as f:
        dom.feed(f.read())
    if dom.body.get('data-report-ready') != 'true':
        errors.append(f'{name}: <body> has no data-report-ready="true" (the script did not run)')
    return dom


def check_timeline(name, dom, tid, schedule):
    t = dom.timelines.get(tid)
    if t is None:
        errors.append(f'{name}: no timeline {tid}')
        return None
    if len(t['rows']) != len(schedule):
        errors.append(f'{name}: {tid} has {len(t["rows"])} device rows, want {len(schedule)}')
    for d, (row, ops) in enumerate(zip(t['rows'], schedule)):
        got = [r.get('data-op') for r in row]
        if got != ops:
            errors.append(f'{name}: {tid} device {d}: ops {got[:6]}... want {ops[:6]}... '
                          f'({len(got)} vs {len(ops)})')
    return t


# The single pipeline: rows and ops exactly the plan's schedule, memory bars, stages.
plan = json.load(open(f'{tmp}/plan.json'))
schedule = plan['plan']['schedule']
dom = parse('plan')
t = check_timeline('plan', dom, 'timeline-0-plan', schedule)
if plan.get('best_baseline') and 'timeline-0-baseline' not in dom.timelines:
    errors.append('plan: no timeline of the best baseline ' + plan['best_baseline'])
if dom.counts['mem-bar'] != len(schedule):
    errors.append(f'plan: {dom.counts["mem-bar"]} memory bars, want {len(schedule)}')
if dom.counts['stage-row'] != len(plan['plan']['partition']):
    errors.append(f'plan: {dom.counts["stage-row"]} stage rows, want '
                  f'{len(plan["plan"]["partition"])}')
colour = {}
for row in (t['rows'] if t else []):
    for r in row:
        colour.setdefault(r.get('data-kind'), r.get('fill'))

# The layout: every distinct pipeline's timeline (the first one's ops are the --json plan's)
# and its replicas.
layout = json.load(open(f'{tmp}/layout.json'))
ldom = parse('layout')
check_timeline('layout', ldom, 'timeline-0-plan', layout['plan']['schedule'])
pipelines = layout['layout']['pipelines']
replicas = sum(len(p['replicas']) for p in pipelines)
for name, d in (('layout', ldom), ('sim', parse('sim'))):
    if d.counts['replica-row'] != replicas:
        errors.append(f'{name}: {d.counts["replica-row"]} replica rows, want {replicas}')
    for p, pipe in enumerate(pipelines):
        t = d.timelines.get(f'timeline-{p}-plan')
        if t is None or len(t['rows']) != len(pipe['device_gpus']):
            errors.append(f'{name}: pipeline {p} has no timeline of '
                          f'{len(pipe["device_gpus"])} device rows')


def read_png(path, max_rows):
    """RGB rows [0, max_rows) of an 8-bit RGB or RGBA, non-interlaced PNG."""
    data = open(path, 'rb').read()
    if data[:8] != b'\x89PNG\r\n\x1a\n':
        raise ValueError('not a PNG')
    pos, idat = 8, b''
    while pos < len(data):
        length, kind = struct.unpack('>I4s', data[pos:pos + 8])
        body = data[pos + 8:pos + 8 + length]
        pos += 12 + length
        if kind == b'IHDR':
            width, height, depth, ctype, _, _, interlace = struct.unpack('>IIBBBBB', body)
        elif kind == b'IDAT':
            idat += body
        elif kind == b'IEND':
            break
    if depth != 8 or ctype not in (2, 6) or interlace:
        raise ValueError(f'unsupported PNG: depth {depth}, colour type {ctype}')
    bpp = 3 if ctype == 2 else 4
    raw, stride = zlib.decompress(idat), width * bpp
    prev, rows, i = bytearray(stride), [], 0
    for _ in range(min(height, max_rows)):
        f, line = raw[i], bytearray(raw[i + 1:i + 1 + stride])
        i += 1 + stride
        for x in range(stride):
            a = line[x - bpp] if x >= bpp else 0
            b = prev[x]
            c = prev[x - bpp] if x >= bpp else 0
            if f == 1:
                line[x] = (line[x] + a) & 255
            elif f == 2:
                line[x] = (line[x] + b) & 255
            elif f == 3:
                line[x] = (line[x] + ((a + b) >> 1)) & 255
            elif f == 4:
                p = a + b - c
                pa, pb, pc = abs(p - a), abs(p - b), abs(p - c)
                line[x] = (line[x] + (a if pa <= pb and pa <= pc else b if pb <= pc else c)) & 255
        rows.append([tuple(line[x:x + 3]) for x in range(0, stride, bpp)])
        prev = line
    return rows


# The first timeline's plot, from the geometry constants of report/html_report.h.
geometry = dict(re.findall(r'constexpr int (k\w+Px) = (\d+);', open(header).read()))
g = {k: int(v) for k, v in geometry.items()}
top = g['kHeaderHeightPx'] + g['kSectionHeadingPx'] + g['kAxisHeightPx']
bottom = top + len(schedule) * g['kRowHeightPx']
left, right = g['kLabelWidthPx'], g['kLabelWidthPx'] + g['kPlotWidthPx']
try:
    from PIL import Image  # when available; the decoder above otherwise
    img = Image.open(f'{tmp}/plan.png').convert('RGB')
    pixels = [[img.getpixel((x, y)) for x in range(img.width)] for y in range(bottom)]
except ImportError:
    pixels = read_png(f'{tmp}/plan.png', bottom)
area = (bottom - top) * (right - left)
for kind in ('F', 'B'):
    hexa = colour.get(kind)
    if not hexa:
        errors.append(f'plan: no {kind} op in the DOM')
        continue
    want = tuple(int(hexa[i:i + 2], 16) for i in (1, 3, 5))
    n = sum(1 for y in range(top, bottom) for x in range(left, right)
            if all(abs(p - q) <= 2 for p, q in zip(pixels[y][x], want)))
    print(f'{kind} ({hexa}): {n} of {area} pixels of the first timeline')
    if n < area // 20:
        errors.append(f'pixels: {kind} colour {hexa} covers {n} of {area} pixels of the first '
                      f'timeline (x {left}..{right}, y {top}..{bottom}); want >= {area // 20}')

for e in errors:
    print('FAIL', e)
sys.exit(1 if errors else 0)
EOF

[ "$fail" = 0 ] && echo "all checks passed"
exit "$fail"
