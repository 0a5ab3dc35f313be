"""report.py — one self-contained HTML page per run (or per comparison): see the credit.

    python report.py runs/keydoor-prover-s0                 # writes runs/keydoor-prover-s0/report.html
    python report.py --open runs/keydoor-prover-s0          # ... and opens it in the browser
    python report.py runs/keydoor-grpo-s0 runs/keydoor-prover-s0    # several runs: one tab each,
                                                            # <their common parent>/report.html (-o to choose)

train.py rewrites `<out>/report.html` after each evaluation and at the end (next to curves.png).

What the page holds, per run (a tab each when there are several, plus overlaid held-out curves):
    * curves: success vs policy updates and vs generated tokens (rollout + verify + judge), inline
      SVG drawn here (no plotting library, no image files);
    * the config (config.json), folded;
    * a per-update table from metrics.jsonl: outcomes, tokens, the method's own counters, lab/*;
    * the group view, from records.jsonl (records.py): a recorded group's G trajectories side by
      side, one row per turn (action, observation, validity, ground-truth pivotal turns in the
      credit lab), ProVer's judged segment highlighted with its Δ̂ ± SE and the outcomes of the
      continuations from before and after it, and per trajectory a heat strip of the per-turn
      advantage before (GRPO) and after the method's credit; filters by status (credited, judged
      but not credited, dropped with its reason, eligible, ...) and task type.
`report.html#groups` shows only the group views (what README's screenshot shows).

Self-contained: inline CSS, JS and SVG, the data as embedded JSON; no network, no CDN, no src/href
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

REPORT_UPDATES = 40          # update records embedded for the group view (all updates are in the table)
METHOD_PREFIX = {"prover": "prover/", "prover-plus": "prover/", "gigpo": "gigpo/", "spo-chain": "spo/", "spo-tree": "spo/",
                 "criticsearch": "critic/", "grpo-matched": "matched/"}
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
    pre = METHOD_PREFIX.get(run["method"])
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
CSS = """
*{box-sizing:border-box}
body{font:13px/1.35 system-ui,-apple-system,"Segoe UI",Roboto,"DejaVu Sans",sans-serif;margin:0;color:#222;background:#fafafa}
header{background:#24292f;color:#fff;padding:8px 16px}
header h1{font-size:17px;margin:0 12px 0 0;display:inline-block}
header .sub{color:#c9d1d9;font-size:12px}
nav.tabs{margin-top:6px}
nav.tabs button{background:#444c56;color:#fff;border:0;padding:4px 10px;margin-right:4px;border-radius:4px 4px 0 0;cursor:pointer;font:inherit}
nav.tabs button.on{background:#fafafa;color:#222;font-weight:600}
main{padding:8px 16px}
h2{font-size:16px;margin:6px 0}
h3{font-size:14px;margin:14px 0 4px}
.meta,.legend{color:#555;font-size:12px;margin:2px 0 6px}
.legend b{color:#333}
.run{display:none}.run.on{display:block}
svg.curves{background:#fff;border:1px solid #ddd;margin:0 8px 8px 0;max-width:49%;height:auto}
svg .grid{stroke:#eee}svg .frame{fill:none;stroke:#bbb}svg .ax{stroke:#999}
svg .tk{font-size:10px;fill:#555}svg .ct{font-size:12px;font-weight:600;fill:#333}svg .lg{font-size:10px;fill:#333}
.scroll{max-height:300px;overflow:auto;border:1px solid #ddd;background:#fff}
table.upd{border-collapse:collapse;font-size:12px;width:100%}
table.upd th{position:sticky;top:0;background:#eef1f4;text-align:right;padding:3px 6px;font-weight:600;white-space:nowrap}
table.upd td{text-align:right;padding:2px 6px;border-top:1px solid #f0f0f0;font-variant-numeric:tabular-nums}
table.cfg{border-collapse:collapse;font-size:12px;background:#fff}
table.cfg th{text-align:left;padding:1px 8px;font-weight:500;color:#555}table.cfg td{padding:1px 8px;font-family:ui-monospace,monospace}
details.sec{margin:8px 0}details summary{cursor:pointer;font-weight:600;font-size:14px}
button.view{font:inherit;font-size:11px;padding:0 6px;cursor:pointer}
.controls{display:flex;flex-wrap:wrap;gap:4px 14px;align-items:center;background:#fff;border:1px solid #ddd;padding:6px 8px;margin-bottom:6px}
.controls label{white-space:nowrap}
.ustats{font-size:11px;color:#555;margin:0 0 6px}
.group{background:#fff;border:1px solid #ccc;border-left:5px solid #999;margin:0 0 12px;padding:6px 8px}
.group.st-credited{border-left-color:#1a9850}.group.st-not-credited{border-left-color:#e0a800}
.group.st-dropped{border-left-color:#d73027}.group.st-eligible{border-left-color:#4575b4}
.ghead{margin-bottom:4px}.ghead .task{color:#555}
.badge{display:inline-block;padding:0 6px;border-radius:8px;font-size:11px;font-weight:600;color:#fff;background:#888;margin-right:4px}
.badge.st-credited{background:#1a9850}.badge.st-not-credited{background:#c89600}.badge.st-dropped{background:#d73027}
.badge.st-eligible{background:#4575b4}.badge.st-mixed{background:#777}.badge.st-uniform{background:#aaa}
.judge,.csum{background:#f6f8fa;border:1px solid #e1e4e8;padding:4px 8px;margin:4px 0;font-size:12px}
.judge .k{color:#555}.judge .drop{color:#b00}
.dots span{display:inline-block;width:9px;height:9px;border-radius:50%;margin-right:1px;border:1px solid #1a9850;vertical-align:-1px}
.dots span.o1{background:#1a9850}.dots span.o0{background:#fff;border-color:#999}
.tscroll{overflow-x:auto}
table.traj{border-collapse:separate;border-spacing:3px 0;font-size:11px;table-layout:fixed}
table.traj th,table.traj td{vertical-align:top;width:172px;min-width:120px}
table.traj th.tn,table.traj td.tn{width:34px;min-width:34px;color:#888;text-align:right;font-weight:400}
table.traj th{text-align:left;font-weight:600;padding:2px 3px;background:#f2f2f2;border-radius:3px 3px 0 0}
th.win .oc{color:#1a9850}th.lose .oc{color:#d73027}
td.cell{background:#fcfcfc;border:1px solid #eee;padding:2px 3px;overflow-wrap:anywhere}
td.none{background:transparent;border:0}
td.gap{color:#999;text-align:center;font-style:italic;padding:1px}
td.cell.el{color:#aaa;text-align:center}
.act{font-family:ui-monospace,Menlo,Consolas,monospace;font-weight:600;color:#0b3d91}
.obs{color:#555;max-height:3.9em;overflow:hidden}
td.seg{background:#fff6bf;border:2px solid #e0a800}
td.seg.applied{background:#e3f6e3;border-color:#1a9850}
.seg-label{font-weight:700;color:#6b4e00;margin-bottom:2px}td.seg.applied .seg-label{color:#0f5e2d}
.pv{display:inline-block;font-size:10px;font-weight:700;padding:0 4px;border-radius:3px;color:#fff;margin-right:3px}
.pv-key{background:#7b3294}.pv-trap{background:#000}.pv-nokey{background:#b35806}
.bad{color:#b00;font-size:10px;font-weight:600;margin-right:3px}.raw{color:#b00;font-family:monospace}
.cd{font-size:10px;font-weight:700;margin-left:2px}.cd.pos{color:#1a9850}.cd.neg{color:#d73027}
.strip{margin-top:3px;line-height:0}
.srow{display:flex;align-items:center;height:11px;margin-bottom:1px}
.srow i{font-style:normal;font-size:9px;line-height:11px;color:#666;width:12px;flex:none}
.srow span{flex:1 1 0;max-width:14px;min-width:2px;height:10px;margin-right:1px}
.srow span.sg{outline:2px solid #e0a800;outline-offset:-1px}
.srow span.pk{box-shadow:inset 0 -3px 0 #7b3294}
.scale span{display:inline-block;width:16px;height:9px;vertical-align:-1px}
.empty{color:#888;font-style:italic}
.err{color:#b00;white-space:pre-wrap}
body.only-groups header .sub,body.only-groups .sec-curves,body.only-groups .sec-config,body.only-groups .sec-table,
body.only-groups #compare,body.only-groups .meta{display:none}
"""

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

JS = r"""
(function(){
const DATA = JSON.parse(document.getElementById('report-data').textContent);
const ORDER = ['credited','not credited','dropped','eligible','mixed','uniform'];
const HELP = {'credited':'ProVer: Δ̂ > margin, credit applied; other methods: some turn\'s advantage changed',
  'not credited':'ProVer: judged and verified, Δ̂ ≤ margin','dropped':'ProVer: the proposal was dropped (reason shown)',
  'eligible':'1..3 successes, advantages unchanged','mixed':'outcomes differ, not eligible','uniform':'all outcomes equal'};
const NAMES = {'prover':'ProVer','gigpo':'GiGPO','spo-chain':'SPO-chain','spo-tree':'SPO-tree','criticsearch':'CriticSearch','grpo-matched':'GRPO-matched','grpo':'GRPO'};
function h(tag, attrs, ...kids){
  const e = document.createElement(tag);
  for (const [k,v] of Object.entries(attrs||{})){
    if (v==null || v===false) continue;
    if (k==='class') e.className = v; else if (k==='style') e.style.cssText = v; else e.setAttribute(k, v===true ? '' : v);
  }
  for (const c of kids.flat()){ if (c==null || c===false) continue; e.append(c.nodeType ? c : document.createTextNode(String(c))); }
  return e;
}
const sg = (x,d=3) => x==null ? '?' : (x>=0 ? '+' : '−') + Math.abs(x).toFixed(d);
const f3 = (x) => x==null ? '?' : Number(x).toFixed(3);
const slug = (s) => s.replace(/\s+/g,'-');
function color(a){
  if (a==null) return '#ddd';
  const t = Math.max(-1, Math.min(1, a)), base = [247,247,247], pos = [26,152,80], neg = [215,48,39];
  const c = t>=0 ? pos : neg, k = Math.abs(t);
  return 'rgb(' + base.map((b,i) => Math.round(b + (c[i]-b)*k)).join(',') + ')';
}
function dots(xs){
  return h('span',{class:'dots'}, xs.map(v => v===1 ? h('span',{class:'o1',title:'success'}) :
    v===0 ? h('span',{class:'o0',title:'failure'}) : h('b',{}, Number(v).toFixed(2)+' ')));
}
function strip(tr, seg){
  const rows = [['G', tr.A], ['F', tr.F]];
  return h('div',{class:'strip'}, rows.map(([lab, xs]) => h('div',{class:'srow', title: lab==='G' ? 'GRPO advantage per turn' : 'final advantage per turn'},
    h('i',{},lab), (tr.F||[]).map((_,t) => {
      const a = xs ? xs[t] : null, inSeg = seg && t>=seg[0] && t<=seg[1];
      const cls = [inSeg ? 'sg' : '', tr.truth && tr.truth[t] ? 'pk' : ''].join(' ').trim();
      return h('span',{class: cls || null, style:'background:'+color(a),
        title:'turn '+(t+tr.s0)+': GRPO '+(tr.A ? f3(tr.A[t]) : 'n/a')+' → final '+f3(tr.F[t])+(tr.truth && tr.truth[t] ? ' ['+tr.truth[t]+']' : '')});
    }))));
}
function judgePanel(j, g){
  if (!j) return null;
  const head = h('div',{}, h('b',{},'Judge'), ' examined success #'+j.traj+' · ',
    h('span',{class:'k'},'status '), j.status, j.repairs ? ' ('+j.repairs+' repairs)' : '', ' · ', h('span',{class:'k'},'tool calls '), j.tools);
  if (j.start==null) return h('div',{class:'judge'}, head, h('div',{class:'drop'}, 'dropped: '+(j.reason||'?')));
  const verdict = j.applied ? 'credited: +λ·Δ̂ on turns '+j.start+'–'+j.end : 'no credit (Δ̂ ≤ margin)';
  return h('div',{class:'judge'}, head,
    h('div',{}, h('span',{class:'k'},'failure mode: '), j.mode||'—'),
    h('div',{}, h('span',{class:'k'},'rationale: '), j.why||'—'),
    h('div',{class:'verif'}, h('b',{},'Δ̂ = '+sg(j.delta)+' ± '+f3(j.se)), ' (K = '+j.k+') · from s_pre (before turn '+j.start+'): ',
      dots(j.pre||[]), ' SR '+f3(j.sr_pre)+' → from s_post (after turn '+j.end+'): ', dots(j.post||[]), ' SR '+f3(j.sr_post)+' · ', h('b',{}, verdict)));
}
function creditSummary(g, method){
  if (method==='prover' || method==='grpo') return null;
  let n=0, s=0, m=0;
  for (const tr of g.trajs) for (let t=0; t<tr.F.length; t++){
    const c = tr.A ? tr.F[t]-tr.A[t] : tr.F[t];
    if (Math.abs(c) > 1e-9){ n++; s += Math.abs(c); m = Math.max(m, Math.abs(c)); }
  }
  const what = (method==='spo-chain'||method==='spo-tree') ? 'SPO replaces GRPO\'s advantage in eligible groups (branches without a GRPO value: F only)' :
    method==='criticsearch' ? 'F − G = α × the critic\'s normalised turn label' : method==='gigpo' ? 'F − G = ω × the step advantage within same-observation turns' :
    method==='grpo-matched' ? 'extra rollouts joined the group' : '';
  return h('div',{class:'csum'}, h('b',{}, NAMES[method]||method), ': ', n ? n+' turns changed (mean |F − G| '+(s/n).toFixed(3)+', max '+m.toFixed(3)+')' : 'no turn changed', what ? ' · '+what : '');
}
function groupCard(g, rec, method){
  const j = g.judge, seg = j && j.start!=null ? [j.start, j.end] : null;
  const card = h('div',{class:'group st-'+slug(g.status), 'data-status':g.status, 'data-type':g.type});
  card.append(h('div',{class:'ghead'}, h('span',{class:'badge st-'+slug(g.status), title:HELP[g.status]||''}, g.status),
    g.reason ? h('span',{class:'badge st-dropped'}, g.reason) : null,
    h('b',{}, 'update '+rec.step+' · group '+g.gid), ' · task '+g.task+' ('+g.type+') · '+g.succ+'/'+g.G+' successes'+(g.eligible ? ' · eligible' : '')+' · ',
    h('span',{class:'task'}, g.text)));
  card.append(judgePanel(j, g) || creditSummary(g, method) || '');
  const thead = h('tr',{}, h('th',{class:'tn'},'turn'), g.trajs.map(tr => h('th',{class: tr.won ? 'win' : 'lose'},
    h('span',{class:'oc'}, tr.won ? '✓' : '✗'), ' #'+tr.i+' R='+tr.R+' · '+tr.n+' turns'+(tr.s0 ? ' (branch from '+tr.s0+')' : ''),
    strip(tr, j && j.sid!=null && g.trajs.indexOf(tr)===j.sid ? seg : null))));
  const texts = g.trajs.map(tr => { const m = {}; for (const x of tr.txt) m[x[0]] = x; return m; });
  const maxT = Math.max(0, ...g.trajs.map(tr => tr.s0 + tr.F.length));
  const body = []; let gapFrom = null;
  const flush = (T) => { if (gapFrom!=null){ body.push(h('tr',{}, h('td',{class:'tn'}, gapFrom+(T-1>gapFrom ? '–'+(T-1) : '')),
      h('td',{class:'gap', colspan:g.trajs.length}, '… text not recorded for these turns (every turn is in the strips) …'))); gapFrom = null; } };
  for (let T=0; T<maxT; T++){
    const any = g.trajs.some((tr,i) => texts[i][T-tr.s0]);
    if (!any){ if (gapFrom==null) gapFrom = T; continue; }
    flush(T);
    body.push(h('tr',{}, h('td',{class:'tn'}, T), g.trajs.map((tr,i) => {
      const t = T - tr.s0;
      if (t<0 || t>=tr.F.length) return h('td',{class:'none'});
      const x = texts[i][t], truth = tr.truth && tr.truth[t], ok = tr.ok[t];
      const isSeg = seg && j.sid===i && t>=seg[0] && t<=seg[1];
      const c = tr.A ? tr.F[t]-tr.A[t] : null;
      const badges = [truth ? h('span',{class:'pv pv-'+truth}, truth.toUpperCase()) : null,
        ok==='x' ? h('span',{class:'bad'},'no <action> tag') : ok==='n' ? h('span',{class:'bad'},'not admissible') : null,
        c!=null && Math.abs(c)>1e-9 ? h('span',{class:'cd '+(c>0?'pos':'neg'), title:'final − GRPO advantage'}, sg(c)) : null];
      const cls = ['cell', isSeg ? 'seg' : '', isSeg && j.applied ? 'applied' : '', x ? '' : 'el'].join(' ').replace(/\s+/g,' ').trim();
      const td = h('td',{class:cls});
      if (isSeg && t===seg[0]) td.append(h('div',{class:'seg-label'}, 'judged segment '+seg[0]+'–'+seg[1]+' · Δ̂ = '+sg(j.delta)+' ± '+f3(j.se)+(j.applied ? ' · credited' : ' · not credited')));
      if (x){ td.append(h('div',{class:'act'}, x[1] || '(empty)'));
              if (x[3] && x[3]!==x[1]) td.append(h('div',{class:'raw', title:'raw output (no <action> tag)'}, x[3]));
              td.append(h('div',{class:'obs'}, x[2])); }
      else td.append('·');
      td.append(h('div',{}, badges));
      return td; })));
  }
  flush(maxT);
  card.append(h('div',{class:'tscroll'}, h('table',{class:'traj'}, h('thead',{},thead), h('tbody',{},body))));
  if (g.trajs_total > g.trajs.length) card.append(h('div',{class:'legend'}, (g.trajs_total-g.trajs.length)+' more trajectories not recorded'));
  return card;
}
function defaultStep(run){
  const recs = run.records; if (!recs.length) return null;
  for (const pick of [g => g.judge && g.judge.start!=null && g.judge.applied, g => g.judge && g.judge.start!=null, g => g.status==='credited'])
    for (let i=recs.length-1; i>=0; i--) if (recs[i].groups.some(pick)) return recs[i].step;
  return recs[recs.length-1].step;
}
function initGroups(k){
  const run = DATA.runs[k], box = document.getElementById('groups-'+k);
  const ctl = box.querySelector('.controls'), out = box.querySelector('.gv');
  if (!run.records.length){ out.append(h('p',{class:'empty'},'No update records yet (records.jsonl is written from update 1 on).')); ctl.remove(); return; }
  const sel = h('select',{class:'upd-sel'}, run.records.map(r => h('option',{value:r.step}, 'update '+r.step+' · '+r.groups.filter(g => g.status==='credited').length+' credited')),
    h('option',{value:'all'}, 'all recorded updates'));
  sel.value = String(defaultStep(run));
  const st = {}; ORDER.forEach(s => st[s] = h('input',{type:'checkbox', checked:true}));
  const types = [...new Set(run.records.flatMap(r => r.groups.map(g => g.type)))].sort();
  const typ = h('select',{}, h('option',{value:''},'all task types'), types.map(t => h('option',{value:t}, t)));
  ctl.append(h('label',{}, 'Update ', sel), h('span',{}, 'Show: ', ORDER.map(s => h('label',{title:HELP[s]}, st[s], ' '+s+' '))), h('label',{}, typ));
  const count = h('span',{class:'legend'}); ctl.append(count);
  function render(){
    out.textContent = '';
    const recs = sel.value==='all' ? run.records : run.records.filter(r => String(r.step)===sel.value);
    let shown = 0, total = 0;
    for (const rec of recs){
      if (sel.value!=='all'){
        const stats = Object.entries(rec.stats||{}).map(([a,b]) => a+' '+(typeof b==='number' ? +b.toFixed(3) : b)).join(' · ');
        out.append(h('p',{class:'ustats'}, 'update '+rec.step+': '+rec.groups.length+' groups recorded (of '+rec.groups_total+' offered, best first)'+(stats ? ' · '+stats : '')));
      }
      for (const g of rec.groups){
        total++;
        if (!st[g.status] || !st[g.status].checked || (typ.value && g.type!==typ.value)) continue;
        if (shown >= 40) continue;
        out.append(groupCard(g, rec, run.method)); shown++;
      }
    }
    count.textContent = 'showing '+shown+' of '+total+' recorded groups'+(shown>=40 ? ' (first 40)' : '');
    if (!shown) out.append(h('p',{class:'empty'},'No recorded group matches the filters.'));
  }
  [sel, typ, ...Object.values(st)].forEach(e => e.addEventListener('change', render));
  box._select = (step) => { sel.value = String(step); render(); box.scrollIntoView(); };
  render();
}
function showRun(k){
  document.querySelectorAll('.run').forEach(e => e.classList.toggle('on', e.dataset.run===String(k)));
  document.querySelectorAll('nav.tabs button').forEach(e => e.classList.toggle('on', e.dataset.run===String(k)));
}
try {
  if (location.hash==='#groups') document.body.classList.add('only-groups');
  DATA.runs.forEach((_,k) => initGroups(k));
  document.querySelectorAll('nav.tabs button').forEach(b => b.addEventListener('click', () => showRun(b.dataset.run)));
  document.querySelectorAll('button.view').forEach(b => b.addEventListener('click', () => {
    showRun(b.dataset.run); document.getElementById('groups-'+b.dataset.run)._select(b.dataset.step); }));
  showRun(0);
} catch (e) {
  document.body.prepend(h('pre',{class:'err'}, 'report.html: script error: '+e+'\n'+(e.stack||'')));
}
})();
"""


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
