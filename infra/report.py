"""report.py — one self-contained HTML page per run (or per comparison): see the credit.

    python -m infra.report runs/keydoor-prover-s0           # writes runs/keydoor-prover-s0/report.html
    python -m infra.report --open runs/keydoor-prover-s0    # ... and opens it in the browser
    python -m infra.report runs/keydoor-grpo-s0 runs/keydoor-prover-s0   # several runs: one tab each,
                                                            # <their common parent>/report.html (-o to choose)

train.py rewrites `<out>/report.html` after each evaluation and at the end (next to curves.png).

What the page holds, per run (a tab each when there are several, plus overlaid held-out curves):
    * curves: success vs policy updates and vs generated tokens (rollout + verify + judge), inline
      SVG drawn here (no plotting library, no image files);
    * the config (config.json), folded;
    * a per-update table from metrics.jsonl: outcomes, tokens, the method's own counters, lab/*;
    * the group view, from records.jsonl (infra/records.py): a recorded group's G trajectories side by
      side, one row per turn (action, observation, validity, ground-truth pivotal turns in the
      credit lab), ProVer's judged segment highlighted with its Δ̂ ± SE and the outcomes of the
      continuations from before and after it, and per trajectory a heat strip of the per-turn
      advantage before (GRPO) and after the method's credit; filters by status (credited, judged
      but not credited, dropped with its reason, eligible, ...) and task type.
`report.html#groups` shows only the group views (what README's screenshot shows).

Self-contained: inline CSS and JS (report.css, report.js beside this file) and SVG, the data as embedded JSON; no network, no CDN, no src/href
to any URL. Size: the metrics rows, plus at most REPORT_UPDATES update records (evenly spaced over
the run, the latest always in), each ≤ records.MAX_RECORD_BYTES (16–94 KB measured), so a page is
about 0.1–4 MB. Leaves out: the judge's transcript (segments.md has its reading), updates past the
REPORT_UPDATES sample in the group view (all are in the table), live refresh.
Only the standard library (and rundir's readers): it runs wherever the run directory is.
"""
from __future__ import annotations

import argparse
import html
import json
import math
import os
import sys
import time

from infra import rundir
from methods import METHODS

REPORT_UPDATES = 40          # update records embedded for the group view (all updates are in the table)


def _asset(name: str) -> str:
    """The page's CSS / JS, kept beside this file (inlined into every page)."""
    with open(os.path.join(os.path.dirname(os.path.abspath(__file__)), name), encoding="utf-8") as f:
        return f.read()


COLORS = ["#1f77b4", "#d62728", "#2ca02c", "#9467bd", "#ff7f0e", "#17becf", "#8c564b", "#e377c2"]


# ---------------------------------------------------------------------------------------------
# Reading a run directory
# ---------------------------------------------------------------------------------------------
def sample(n: int, k: int) -> list[int]:
    """k indices of range(n) evenly spaced, the last one included (all of them if n <= k)."""
    if n <= k:
        return list(range(n))
    return sorted({round(j * (n - 1) / (k - 1)) for j in range(k)})


def load_run(d: str) -> dict:
    """config.json, metrics.jsonl and a sample of records.jsonl (complete lines only)."""
    cfg_path = os.path.join(d, "config.json")
    try:
        config = json.load(open(cfg_path)) if os.path.exists(cfg_path) else {}
    except (json.JSONDecodeError, OSError):
        config = {}
    rows = rundir.read_metrics(os.path.join(d, "metrics.jsonl"))
    recs = rundir.read_metrics(os.path.join(d, "records.jsonl"))
    recs = [r for r in recs if isinstance(r.get("groups"), list)]
    keep = [recs[i] for i in sample(len(recs), REPORT_UPDATES)]
    name = os.path.basename(os.path.normpath(d)) or d
    return {"name": name, "dir": d, "config": config, "rows": rows, "records": keep,
            "recorded_steps": [r["step"] for r in recs], "method": config.get("method", ""),
            "env": config.get("env", "")}


# ---------------------------------------------------------------------------------------------
# Inline SVG charts
# ---------------------------------------------------------------------------------------------
def _fmt_tick(x: float) -> str:
    a = abs(x)
    if a >= 1e6:
        return f"{x / 1e6:.1f}M".replace(".0M", "M")
    if a >= 1e3:
        return f"{x / 1e3:.0f}k"
    return f"{x:g}"


def _nice_ticks(lo: float, hi: float, n: int = 5) -> list[float]:
    if hi <= lo:
        return [lo]
    raw = (hi - lo) / n
    mag = 10 ** math.floor(math.log10(raw))
    step = next(m * mag for m in (1, 2, 2.5, 5, 10) if m * mag >= raw)
    t, out = (lo // step) * step, []
    while t <= hi + 1e-9:
        if t >= lo - 1e-9:
            out.append(round(t, 10))
        t += step
    return out


def svg_chart(series: list[dict], xlabel: str, title: str, w: int = 520, h: int = 250) -> str:
    """A line chart of success rates (y in [0, 1]). series: {label, color, pts [(x, y)], dim (bool:
    thin and light), marks (bool: dots on the points)}."""
    L, R, T, B = 46, 12, 26, 40
    pw, ph = w - L - R, h - T - B
    xs = [x for s in series for x, _ in s["pts"]]
    x0, x1 = (min(xs), max(xs)) if xs else (0, 1)
    if x1 <= x0:
        x1 = x0 + 1
    X = lambda x: L + (x - x0) / (x1 - x0) * pw                       # noqa: E731
    Y = lambda y: T + (1 - max(0.0, min(1.0, y))) * ph                 # noqa: E731
    out = [f'<svg class="curves" viewBox="0 0 {w} {h}" width="{w}" height="{h}" '
           f'role="img" aria-label="{html.escape(title)}">',
           f'<text x="{L}" y="16" class="ct">{html.escape(title)}</text>']
    for y in (0, 0.25, 0.5, 0.75, 1):
        out.append(f'<line x1="{L}" x2="{L + pw}" y1="{Y(y):.1f}" y2="{Y(y):.1f}" class="grid"/>'
                   f'<text x="{L - 6}" y="{Y(y) + 4:.1f}" class="tk" text-anchor="end">{y:g}</text>')
    for x in _nice_ticks(x0, x1):
        out.append(f'<line x1="{X(x):.1f}" x2="{X(x):.1f}" y1="{T + ph}" y2="{T + ph + 4}" class="ax"/>'
                   f'<text x="{X(x):.1f}" y="{T + ph + 16}" class="tk" text-anchor="middle">{_fmt_tick(x)}</text>')
    out.append(f'<rect x="{L}" y="{T}" width="{pw}" height="{ph}" class="frame"/>')
    out.append(f'<text x="{L + pw / 2:.1f}" y="{h - 6}" class="tk" text-anchor="middle">{html.escape(xlabel)}</text>'
               f'<text transform="translate(12 {T + ph / 2:.1f}) rotate(-90)" class="tk" text-anchor="middle">success rate</text>')
    for s in series:
        pts = [(X(x), Y(y)) for x, y in s["pts"] if y == y]
        if not pts:
            continue
        d = " ".join(f"{px:.1f},{py:.1f}" for px, py in pts)
        op, sw = (0.35, 1.2) if s.get("dim") else (1.0, 2.0)
        out.append(f'<polyline points="{d}" fill="none" stroke="{s["color"]}" stroke-width="{sw}" opacity="{op}">'
                   f'<title>{html.escape(s["label"])}</title></polyline>')
        if s.get("marks"):
            out += [f'<circle cx="{px:.1f}" cy="{py:.1f}" r="3" fill="{s["color"]}"/>' for px, py in pts]
    ly = T + 4
    for s in series:                                                       # legend, top right
        out.append(f'<rect x="{L + pw - 150}" y="{ly}" width="12" height="3" fill="{s["color"]}" '
                   f'opacity="{0.35 if s.get("dim") else 1}"/><text x="{L + pw - 134}" y="{ly + 5}" class="lg">'
                   f'{html.escape(s["label"][:28])}</text>')
        ly += 13
    out.append("</svg>")
    return "".join(out)


def curve_points(rows: list[dict]) -> dict:
    """(update, train), (update, eval) and the same against cumulative generated tokens."""
    cum, tok = 0, []
    for r in rows:
        cum += r.get("tokens/rollout", 0) + r.get("tokens/verify", 0) + r.get("tokens/judge", 0)
        tok.append(cum)
    tr = [(r["step"], r["train/success"], t) for r, t in zip(rows, tok) if "train/success" in r]
    ev = [(r["step"], r["eval/success"], t) for r, t in zip(rows, tok) if "eval/success" in r]
    return {"train_u": [(s, y) for s, y, _ in tr], "eval_u": [(s, y) for s, y, _ in ev],
            "train_t": [(t, y) for _, y, t in tr], "eval_t": [(t, y) for _, y, t in ev]}


def run_curves(run: dict) -> str:
    if not run["rows"]:
        return '<p class="empty">No metrics yet (metrics.jsonl is empty).</p>'
    p = curve_points(run["rows"])
    mk = lambda a, b: [{"label": "train rollouts", "color": "#1f77b4", "pts": p[a], "dim": True},  # noqa: E731
                       {"label": "held-out eval", "color": "#d62728", "pts": p[b], "marks": True}]
    return (svg_chart(mk("train_u", "eval_u"), "policy updates", "success vs updates")
            + svg_chart(mk("train_t", "eval_t"), "generated tokens (rollout + verify + judge)", "success vs generated tokens"))


def compare_curves(runs: list[dict]) -> str:
    pts = [curve_points(r["rows"]) for r in runs]
    su = [{"label": r["name"], "color": COLORS[k % len(COLORS)], "pts": p["eval_u"], "marks": True}
          for k, (r, p) in enumerate(zip(runs, pts))]
    st = [dict(s, pts=p["eval_t"]) for s, p in zip(su, pts)]
    return (svg_chart(su, "policy updates", "held-out success vs updates")
            + svg_chart(st, "generated tokens (rollout + verify + judge)", "held-out success vs generated tokens"))


# ---------------------------------------------------------------------------------------------
# Tables
# ---------------------------------------------------------------------------------------------
def _cell(v) -> str:
    if isinstance(v, bool) or v is None:
        return "" if v is None else str(v)
    if isinstance(v, int):
        return str(v)
    if isinstance(v, float):
        return f"{v:.3f}" if abs(v) < 1e4 else f"{v:.4g}"
    return html.escape(str(v))


def table_columns(run: dict) -> list[tuple[str, str]]:
    """(key, header) of the per-update table: outcomes and cost, then the method's counters and lab/*."""
    rows = run["rows"]
    present = {k for r in rows for k in r}
    cols = [("step", "update"), ("train/success", "train success"), ("eval/success", "eval success"),
            ("tokens/gen", "tokens gen."), ("time/iter_s", "s / update")]
    pre = METHODS[run["method"]].prefix if run["method"] in METHODS else None
    if pre:
        mine = [k for k in dict.fromkeys(k for r in rows for k in r) if k.startswith(pre) and k.count("/") == 1]
        cols += [(k, k[len(pre):].replace("_", " ")) for k in mine[:8]]
    cols += [(k, k) for k in ("credit/failed_groups", "lab/q_key", "lab/credit_precision", "lab/judge_hit") if k in present]
    return cols


def update_table(run: dict, k: int) -> str:
    cols, shown = table_columns(run), {r["step"] for r in run["records"]}
    head = "".join(f"<th>{html.escape(h)}</th>" for _, h in cols) + "<th>group view</th>"
    body = []
    for r in run["rows"]:
        r = dict(r, **{"tokens/gen": r.get("tokens/rollout", 0) + r.get("tokens/verify", 0) + r.get("tokens/judge", 0)})
        s = r.get("step")
        link = (f'<button class="view" data-run="{k}" data-step="{s}">view</button>' if s in shown
                else ("recorded" if s in run["recorded_steps"] else ""))
        body.append("<tr>" + "".join(f"<td>{_cell(r.get(c))}</td>" for c, _ in cols) + f"<td>{link}</td></tr>")
    return (f'<div class="scroll"><table class="upd"><thead><tr>{head}</tr></thead>'
            f'<tbody>{"".join(body)}</tbody></table></div>')


def config_table(cfg: dict) -> str:
    rows = "".join(f"<tr><th>{html.escape(str(k))}</th><td>{html.escape(v if isinstance(v, str) else json.dumps(v))}</td></tr>"
                   for k, v in cfg.items())
    return f'<table class="cfg">{rows}</table>'


# ---------------------------------------------------------------------------------------------
# The page
# ---------------------------------------------------------------------------------------------
CSS = _asset("report.css")

LEGEND_GROUPS = (
    "<b>Columns</b>: the group's trajectories (same task; ✓ success, ✗ failure; R = outcome). <b>Rows</b>: turns — "
    "the action (bold) and what the env answered. <b>Strip</b> under each header: per-turn advantage, "
    "<b>G</b> = GRPO's (R − group mean, minus format penalties), <b>F</b> = final, after the method's credit; "
    "colour scale <span class=scale><span style='background:#d73027'></span><span style='background:#f4a582'></span>"
    "<span style='background:#f7f7f7'></span><span style='background:#a6d96a'></span><span style='background:#1a9850'>"
    "</span></span> −1 … 0 … +1 (clipped). <b>Yellow box</b>: ProVer's judged segment (green: credited), labelled "
    "with Δ̂ = SR(after) − SR(before) ± SE from K continuations each; ● success ○ failure of each continuation. "
    "<b>+0.25</b> next to a turn: final − GRPO. <span class='pv pv-key'>KEY</span><span class='pv pv-trap'>TRAP</span><span class='pv pv-nokey'>NOKEY</span> "
    "pivotal turns (credit lab ground truth, never shown to the judge). Long trajectories show the text of their first 8 and "
    "last 4 turns; the strip has every turn.")

JS = _asset("report.js")


def render(run_dirs: list[str]) -> str:
    """The whole page for one or several run directories."""
    runs = [load_run(d) for d in run_dirs]
    title = runs[0]["name"] if len(runs) == 1 else f"{len(runs)} runs"
    tabs = "".join(f'<button data-run="{k}">{html.escape(r["name"])}</button>' for k, r in enumerate(runs))
    parts = [f'<!doctype html><html lang="en"><head><meta charset="utf-8">'
             f'<meta name="viewport" content="width=device-width, initial-scale=1">'
             f'<title>Credit report: {html.escape(title)}</title><style>{CSS}</style></head><body>',
             f'<header><h1>Credit report — {html.escape(title)}</h1>'
             f'<span class="sub">written {time.strftime("%Y-%m-%d %H:%M")} by report.py; what each update\'s credit '
             f'step saw and did (records.jsonl) next to the curves (metrics.jsonl)</span>'
             f'{f"<nav class=tabs>{tabs}</nav>" if len(runs) > 1 else ""}</header>']
    if len(runs) > 1:
        parts.append(f'<section id="compare" style="padding:8px 16px"><h3>Comparison</h3>{compare_curves(runs)}</section>')
    parts.append("<main>")
    for k, r in enumerate(runs):
        cfg, rows = r["config"], r["rows"]
        last_eval = next((x["eval/success"] for x in reversed(rows) if "eval/success" in x), None)
        meta = (f'env <b>{html.escape(str(cfg.get("env", "?")))}</b> · method <b>{html.escape(str(cfg.get("method", "?")))}</b>'
                f' · judge {html.escape(str(cfg.get("judge", "?")))} · G = {cfg.get("group_size", "?")} × '
                f'{cfg.get("tasks_per_iter", "?")} tasks · {max((x.get("step", 0) for x in rows), default=0)} of '
                f'{cfg.get("iters", "?")} updates' + (f' · last held-out success {last_eval:.3f}' if last_eval is not None else "")
                + f' · directory {html.escape(r["dir"])}')
        parts.append(
            f'<section class="run" data-run="{k}"><h2>{html.escape(r["name"])}</h2><p class="meta">{meta}</p>'
            f'<div class="sec sec-curves"><h3>Curves</h3><p class="legend">Blue (light): mean success of each update\'s '
            f'training rollouts. Red: held-out success at --eval-temperature. Right: against generated tokens '
            f'(rollouts + verification + judge), the cost axis.</p>{run_curves(r)}</div>'
            f'<details class="sec sec-config"><summary>Config (config.json)</summary>{config_table(cfg)}</details>'
            f'<div class="sec sec-table"><h3>Per update</h3><p class="legend">One row per update (metrics.jsonl; '
            f'update 0 = the warm start). "view" opens that update in the group view ({len(r["records"])} of '
            f'{len(r["recorded_steps"])} recorded updates are in this page, evenly spaced).</p>{update_table(r, k)}</div>'
            f'<div class="sec sec-groups" id="groups-{k}"><h3>Group view</h3><p class="legend">{LEGEND_GROUPS}</p>'
            f'<div class="controls"></div><div class="gv"></div></div></section>')
    parts.append("</main>")
    data = {"runs": [{"name": r["name"], "method": r["method"], "records": r["records"]} for r in runs]}
    # "<" escaped as \u003c: the JSON cannot close its <script> element, whatever a trajectory says
    blob = json.dumps(data, ensure_ascii=True, separators=(",", ":")).replace("<", "\\u003c")
    parts.append(f'<script type="application/json" id="report-data">{blob}</script><script>{JS}</script></body></html>')
    return "".join(parts)


def write(run_dir: str | list[str], out: str | None = None) -> str:
    """Render and write by rename (a reader never sees half a page); returns the path."""
    dirs = [run_dir] if isinstance(run_dir, str) else list(run_dir)
    if out is None:
        out = os.path.join(dirs[0] if len(dirs) == 1 else os.path.commonpath([os.path.abspath(d) for d in dirs]),
                           "report.html")
    page = render(dirs)
    tmp = f"{out}.tmp{os.getpid()}"
    with open(tmp, "w", encoding="utf-8") as f:
        f.write(page)
    os.replace(tmp, out)
    return out


def main(argv=None) -> None:
    p = argparse.ArgumentParser(description="Write report.html for one run directory, or one page for several side by side.")
    p.add_argument("runs", nargs="+", metavar="RUN_DIR", help="run directories (train.py --out)")
    p.add_argument("-o", "--output", default=None,
                   help="output file (default: RUN_DIR/report.html; several runs: <their common parent>/report.html)")
    p.add_argument("--open", action="store_true", help="open the page in the default browser")
    a = p.parse_args(argv)
    for d in a.runs:
        if not os.path.isdir(d):
            raise SystemExit(f"report.py: error: {d}: not a directory")
        if not os.path.exists(os.path.join(d, "metrics.jsonl")):
            raise SystemExit(f"report.py: error: {d}: no metrics.jsonl (not a train.py run directory)")
    path = write(a.runs, a.output)
    print(path)
    if a.open:
        import webbrowser
        webbrowser.open("file://" + os.path.abspath(path))


if __name__ == "__main__":
    main(sys.argv[1:])
