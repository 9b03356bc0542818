#!/usr/bin/env python3
"""The measurements' index: docs/results/*.jsonl -> docs/results/README.md, and
the tables README.md shows between its `<!-- results: ... -->` markers.

    tools/results_index.py           rewrite docs/results/README.md and README.md's tables
    tools/results_index.py --check   exit 1, with one line, when either is stale (CTest)

Each results file holds one experiment kind, one JSON object a line: date,
commit, machine, the configuration, what was predicted and what was measured,
and where the raw run lies (`source`). A new measurement is appended as new
lines (tools/device/*.sh print them); nothing is edited in place. Tables list
the newest first: by date, then later lines before earlier ones.

A README.md table is chosen by its marker:
    <!-- results: accuracy rows=a01-a13 -->   the newest accuracy set that has all these rows
    <!-- results: accuracy set=NAME -->       the rows of one accuracy set
    <!-- results: fsdp2 -->                   the newest device call's races against FSDP2
    <!-- results: fsdp2 machine=nvidia-h200 -->  the same, among lines whose machine names nvidia-h200
    <!-- results: fine_tune -->               the newest fine-tuning set (tools/device/fine_tune.sh)
and ends at `<!-- /results -->`.
"""
import json
import os
import re
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
RESULTS = os.path.join(ROOT, "docs", "results")
INDEX = os.path.join(RESULTS, "README.md")
README = os.path.join(ROOT, "README.md")



def RawRuns(row):
    """Where a set's raw run directories are: in git history for the sets
    measured before raw runs left the tree (`source`), else the device call's
    archive, which stays out of the tree."""
    source = row.get("source")
    if not source:
        return "Raw runs: the device call's archive, not kept in the tree."
    folder = os.path.dirname(source.rstrip("/")) if "/runs/" in source else source
    return f"Raw runs: `{folder}` in git history."

def load(kind):
    path = os.path.join(RESULTS, kind + ".jsonl")
    if not os.path.exists(path):
        return []
    lines = []
    with open(path) as f:
        for n, text in enumerate(f, 1):
            if text.strip():
                try:
                    lines.append(json.loads(text))
                except json.JSONDecodeError as e:
                    sys.exit(f"results_index: {path}:{n}: not JSON: {e}")
    return lines


def newest_first(lines):
    """By date, newest first; among one date, later lines first."""
    order = sorted(range(len(lines)), key=lambda i: (lines[i].get("date", ""), i), reverse=True)
    return [lines[i] for i in order]


def table(header, rows):
    out = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    out += ["| " + " | ".join(str(c) for c in row) + " |" for row in rows]
    return out


def err(p, m):
    return "" if p is None or m in (None, 0) else f"{100 * (p - m) / m:+.1f}%"


def err2(p, m):
    return "" if p is None or m in (None, 0) else f"{100 * (p - m) / m:+.2f}%"


def tok(x):
    return "" if x is None else f"{x:,.0f}"


def ratio(a, b):
    return "" if not a or not b else f"{a / b:.3f}×"


def mb_ga(c):
    return f"{c.get('micro_batch')} × {c.get('grad_accum')}"


SHORT = {"micro_batch": "mb", "grad_accum": "accum", "checkpointed": "ckpt", "global_batch": "batch",
         "loss_chunk": "loss chunk", "offload_staging": "staging", "offload_to": "to", "host_memory_gib": "host GiB",
         "ckpt_every": "ckpt every", "checkpoint_gb": "GB saved"}


def short_config(c):
    """model, GPUs, then every other field as `name value`; strategy and offload values stand alone."""
    parts = [str(c.get("model")), f"{c.get('gpus')} GPU{'s' if c.get('gpus', 1) != 1 else ''}"]
    for k, v in c.items():
        if k in ("model", "gpus") or v is None:
            continue
        if k == "strategy":
            parts.append(str(v))
        elif k == "offload":
            parts.append(f"offload {v}")
        else:
            parts.append(f"{SHORT.get(k, k)} {v}")
    return ", ".join(parts)


# --- accuracy ------------------------------------------------------------------------------------

def accuracy_summary(lines):
    """MAPE and max of step time (outliers left out), max error of peak allocated and reserved."""
    def e(l, key):
        p, m = l["predicted"][key], l["measured"][key]
        return abs(p - m) / m
    kept = [l for l in lines if not l.get("outlier")]
    step = [e(l, "step_s") for l in kept]
    alloc = [e(l, "peak_allocated_gib") for l in lines]
    resv = [e(l, "peak_reserved_gib") for l in lines]
    return dict(n=len(kept), outliers=[l["row"] for l in lines if l.get("outlier")],
                step_mape=100 * sum(step) / len(step), step_max=100 * max(step),
                alloc_max=100 * max(alloc), resv_mape=100 * sum(resv) / len(resv), resv_max=100 * max(resv))


def accuracy_sets(lines):
    sets = {}
    for l in lines:
        sets.setdefault(l["set"], []).append(l)
    return sets


def accuracy_rows(lines):
    rows = []
    for l in lines:
        c, p, m = l["config"], l["predicted"], l["measured"]
        rows.append([l["row"] + (" (outlier)" if l.get("outlier") else ""), c["model"], c["gpus"], c["seq"], mb_ga(c),
                     c["checkpointed"], c["strategy"], c["offload"],
                     f"{1000 * p['step_s']:.1f} ms", f"{1000 * m['step_s']:.1f} ms", err(p["step_s"], m["step_s"]),
                     f"{m['peak_allocated_gib']:.2f} GiB", err2(p["peak_allocated_gib"], m["peak_allocated_gib"]),
                     f"{m['peak_reserved_gib']:.2f} GiB", err(p["peak_reserved_gib"], m["peak_reserved_gib"])])
    return table(["row", "model", "GPUs", "seq", "mb × accum", "checkpointed", "strategy", "offload",
                  "step predicted", "measured", "error", "peak allocated", "error", "peak reserved", "error"], rows)


def summary_line(s):
    out = f"step time {s['step_mape']:.1f}% MAPE (max {s['step_max']:.1f}%) over {s['n']} rows"
    if s["outliers"]:
        out += f" ({', '.join(s['outliers'])} left out)"
    return out + (f"; peak allocated within {s['alloc_max']:.2f}%, peak reserved within {s['resv_max']:.1f}%"
                  f" ({s['resv_mape']:.2f}% mean)")


def expand_rows(spec):
    """'a01-a13' or 'a01,a03,b02' -> the row names."""
    names = []
    for part in spec.split(","):
        m = re.fullmatch(r"([a-z]+)(\d+)-\1?(\d+)", part)
        if m:
            width = len(m.group(2))
            names += [f"{m.group(1)}{i:0{width}d}" for i in range(int(m.group(2)), int(m.group(3)) + 1)]
        else:
            names.append(part)
    return names


def readme_accuracy(lines, selector):
    key, _, value = selector.partition("=")
    if key == "set":
        set_name = value
    elif key == "rows":
        wanted = set(expand_rows(value))
        sets = accuracy_sets(lines)
        newest = [l["set"] for l in newest_first(lines)]
        set_name = next((n for n in dict.fromkeys(newest) if wanted <= {l["row"] for l in sets[n]}), None)
    else:
        sys.exit(f"results_index: README.md accuracy marker needs set=NAME or rows=LIST, not '{selector}'")
    rows = [l for l in lines if l["set"] == set_name]
    if not rows:
        sys.exit(f"results_index: no accuracy set in docs/results/accuracy.jsonl matches README.md's '{selector}'")
    first = rows[0]
    s = accuracy_summary(rows)
    out = [f"Measured on {first['date']}, on {first['machine']}, with `{first['command']}` "
           f"(predictions: profile `{first['profile']}`).", ""]
    out += accuracy_rows(rows)
    out += ["", f"**{summary_line(s)}.**"]
    notes = [f"{l['row']}: {l['note']}" for l in rows if l.get("outlier") and l.get("note")]
    if notes:
        out += ["", "; ".join(notes) + "."]
    return out


def index_accuracy(lines):
    # Sets newest first; the rows of a set in their file order.
    newest = newest_first(lines)
    order = list(dict.fromkeys(l["set"] for l in newest))
    by_set = accuracy_sets(lines)
    sets = {name: by_set[name] for name in order}
    out = ["## Accuracy: predicted against measured, row by row (`accuracy.jsonl`)", "",
           "The rows of [tools/device/accuracy/suite.txt](../../tools/device/accuracy/suite.txt), each planned with every "
           "choice pinned and trained 6 steps; step time is the mean after 2 warm-up steps, memory the caching "
           "allocator's peak. Error = (predicted − measured) / measured. One table per set, newest first.", ""]
    summary = []
    for name, rows in sets.items():
        s = accuracy_summary(rows)
        summary.append([rows[0]["date"], f"[{name}](#{anchor(name)})", rows[0]["machine"], f"`{rows[0]['profile']}`",
                        len(rows), f"{s['step_mape']:.1f}% / {s['step_max']:.1f}%"
                        + (f" ({', '.join(s['outliers'])} left out)" if s["outliers"] else ""),
                        f"{s['alloc_max']:.2f}%", f"{s['resv_mape']:.2f}% / {s['resv_max']:.1f}%", rows[0].get("commit") or ""])
    out += table(["date", "set", "machine", "profile", "rows", "step MAPE / max", "allocated max",
                  "reserved mean / max", "commit"], summary)
    for name, rows in sets.items():
        out += ["", f"### {name}", "", f"{rows[0]['date']}, {rows[0]['machine']}, commit {rows[0].get('commit') or '?'}, "
                f"profile `{rows[0]['profile']}`: `{rows[0].get('command', '')}`. {RawRuns(rows[0])}", ""]
        out += accuracy_rows(rows)
        notes = list(dict.fromkeys(l["note"] for l in rows if l.get("note") and not l.get("outlier")))
        notes += [f"{l['row']}: {l['note']}" for l in rows if l.get("outlier") and l.get("note")]
        if notes:
            out += [""] + [f"- {n}" for n in notes]
    return out


def anchor(title):
    return re.sub(r"[^a-z0-9 -]", "", title.lower()).replace(" ", "-")


# --- the race against FSDP2 ----------------------------------------------------------------------

def fsdp2_row(l):
    m, p = l["measured"], l.get("predicted", {})
    me = m.get("llmplan", {}).get("tokens_per_s_per_gpu")
    eager = m.get("fsdp2_eager", {}).get("tokens_per_s_per_gpu")
    comp = m.get("fsdp2_compiled", {}).get("tokens_per_s_per_gpu")
    return me, eager, comp, p.get("llmplan_tokens_per_s_per_gpu")


def gib(x):
    return "" if x is None else f"{x:.2f} GiB"


def readme_fsdp2(lines, selector=""):
    """The races on the newest line's machine and date, one row per model
    shape (model, seq, micro-batch, accumulation): the newest line of each.
    selector "machine=NAME" keeps only lines whose machine names NAME."""
    if selector:
        key, _, name = selector.partition("=")
        if key != "machine" or not name:
            sys.exit(f"results_index: README.md fsdp2 marker takes machine=NAME, not '{selector}'")
        lines = [l for l in lines if name in l["machine"]]
        if not lines:
            sys.exit(f"results_index: no fsdp2 line ran on a machine named '{name}'")
    newest = newest_first(lines)[0]
    rows_of, shapes = [], set()
    for l in newest_first(lines):
        c = l["config"]
        shape = (c["model"], c["seq"], c["micro_batch"], c.get("grad_accum") or 1)
        if l["date"] != newest["date"] or l["machine"] != newest["machine"] or shape in shapes:
            continue
        shapes.add(shape)
        rows_of.append(l)
    rows_of.reverse()  # in the order they were measured
    commands = list(dict.fromkeys(l["command"] for l in rows_of))
    out = [f"Measured on {newest['date']}, on {newest['machine']}, llmplan then FSDP2 in one device call per row, with "
           + "; ".join(f"`{c}`" for c in commands) + ".", ""]
    rows = []
    for l in rows_of:
        me, eager, comp, _ = fsdp2_row(l)
        m, c = l["measured"], l["config"]
        config = (f"[{c['model']}]({l['plan']}), seq {c['seq']}, mb {c['micro_batch']} × {c.get('grad_accum') or 1}, "
                  f"{c['strategy']}, checkpointed {c['checkpointed']}")
        peaks = " / ".join(gib(m.get(k, {}).get("peak_allocated_gib")) for k in ("llmplan", "fsdp2_compiled"))
        rows.append([config, f"**{tok(me)}** ({100 * m['llmplan']['mfu']:.1f}%)",
                     f"{tok(eager)} ({100 * m['fsdp2_eager']['mfu']:.1f}%)" if eager else "",
                     f"{tok(comp)} ({100 * m['fsdp2_compiled']['mfu']:.1f}%)" if comp else "",
                     f"**{ratio(me, eager)}**" if eager else "", f"**{ratio(me, comp)}**" if comp else "", peaks])
    out += table(["plan", "llmplan tokens/s/GPU (MFU)", "FSDP2 eager", "FSDP2 + torch.compile per block",
                  "llmplan ÷ eager", "llmplan ÷ compiled", "peak allocated, llmplan / FSDP2 compiled"], rows)
    return out


def index_fsdp2(lines):
    out = ["## The race against PyTorch FSDP2 (`fsdp2.jsonl`)", "",
           "Each line: one device call, one plan trained by `llmplan run` and by "
           "[tools/device/fsdp2_reference.py](../../tools/device/fsdp2_reference.py) (eager, and compiled when run), "
           "tokens/s per GPU; predicted is the planner's figure the run reports as \"% of plan\".", ""]
    rows = []
    for l in newest_first(lines):
        me, eager, comp, pred = fsdp2_row(l)
        rows.append([l["date"], short_config(l["config"]), tok(pred), tok(me), tok(eager), tok(comp),
                     ratio(me, eager), ratio(me, comp), gib(l["measured"].get("llmplan", {}).get("peak_allocated_gib")),
                     l.get("commit") or "", l.get("note", "")])
    return out + table(["date", "configuration", "llmplan predicted", "llmplan", "FSDP2 eager", "FSDP2 compiled",
                        "÷ eager", "÷ compiled", "llmplan peak allocated", "commit", "note"], rows)


# --- fine-tuning ---------------------------------------------------------------------------------

def fine_tune_rows(lines):
    rows = []
    for l in lines:
        c, p, m = l["config"], l["predicted"], l["measured"]
        span = "inside documents" if c.get("attention") == "documents" else "whole window"
        work = f"{100 * c['attention_work']:.1f}%" if "attention_work" in c else "100%"
        ev = f"{m['eval_loss']:.4f} (step {m['eval_step']})" if "eval_loss" in m else ""
        rows.append([span, work, f"{1000 * p['step_s']:.1f} ms", f"{1000 * m['step_s']:.1f} ms", err(p["step_s"], m["step_s"]),
                     tok(p["tokens_per_s_per_gpu"]), tok(m["tokens_per_s_per_gpu"]), gib(p["peak_allocated_gib"]),
                     gib(m["peak_allocated_gib"]), err2(p["peak_allocated_gib"], m["peak_allocated_gib"]), ev])
    return rows


FINE_TUNE_HEADER = ["attention", "attention work priced", "step predicted", "measured", "error", "tokens/s predicted",
                    "measured", "peak allocated predicted", "measured", "error", "best held-out loss"]


def readme_fine_tune(lines):
    newest = newest_first(lines)[0]
    rows = [l for l in lines if l.get("set") == newest.get("set")]
    c = newest["config"]
    out = [f"Measured on {newest['date']}, on {newest['machine']}, with `{newest['command']}`: {c['model']}, seq "
           f"{c['seq']}, micro-batch {c['micro_batch']} × {c['grad_accum']}, {c['strategy']}, checkpointed "
           f"{c['checkpointed']}; predictions on profile `{newest['profile']}`, step time the mean after two steps.", ""]
    return out + table(FINE_TUNE_HEADER, fine_tune_rows(rows))


def index_fine_tune(lines):
    out = ["## Fine-tuning runs (`fine_tune.jsonl`)", "",
           "`tools/device/fine_tune.sh`: chat data under its loss mask, `--init-from` an exported Hugging Face "
           "directory, `--eval-every`, attention inside documents against the whole window, each predicted and "
           "measured (`llmplan compare`).", ""]
    rows = []
    for l in newest_first(lines):
        rows.append([l["date"], l["machine"], short_config({k: v for k, v in l["config"].items()
                                                            if k not in ("attention", "attention_work")}),
                     f"`{l['profile']}`"] + fine_tune_rows([l])[0] + [l.get("commit") or ""])
    return out + table(["date", "machine", "configuration", "profile"] + FINE_TUNE_HEADER + ["commit"], rows)


# --- the other kinds -----------------------------------------------------------------------------

def index_plan_choice(lines):
    out = ["## Does the planner choose the fastest plan? (`plan_choice.jsonl`)", "",
           "The plan `llmplan estimate` chooses for a request beside alternatives, each trained in one device call "
           "(`tools/device/plan_choice.sh`); tokens/s per GPU.", ""]
    rows = []
    for l in newest_first(lines):
        p, m = l["predicted"].get("tokens_per_s_per_gpu"), l["measured"]["tokens_per_s_per_gpu"]
        rows.append([l["date"], short_config(l["request"]), l["role"], ", ".join(f"{k} {v}" for k, v in l["plan"].items()),
                     f"`{l['profile']}`", tok(p), tok(m), err(p, m), l.get("commit") or ""])
    return out + table(["date", "request", "plan", "configuration", "profile", "predicted", "measured", "error", "commit"], rows)


def index_offload_pairs(lines):
    out = ["## Offload staging, per unit against slots (`offload_pairs.jsonl`)", "",
           "Runs of one optimizer-offload plan staged per unit (`unit`) and through two slots (`slots`), alternating in "
           "one device call (`tools/device/offload_pairs.sh`).", ""]
    rows = []
    for l in newest_first(lines):
        p, m = l["predicted"], l["measured"]
        adam = f"{m['cpu_adam_s']:.2f} s ({p.get('cpu_adam_s', 0):.2f})" if "cpu_adam_s" in m else ""
        rows.append([l["date"], short_config(l["config"]), l["run"], l.get("form", l.get("offload_staging")), tok(p.get("tokens_per_s_per_gpu")),
                     tok(m["tokens_per_s_per_gpu"]), err(p.get("tokens_per_s_per_gpu"), m["tokens_per_s_per_gpu"]), adam,
                     l.get("commit") or "", l.get("note", "")])
    return out + table(["date", "configuration", "run", "form", "predicted tok/s", "measured", "error",
                        "CPU AdamW measured (predicted)", "commit", "note"], rows)


def index_offload_modes(lines):
    out = ["## Offload modes and tiers (`offload_modes.jsonl`)", ""]
    rows = []
    for l in newest_first(lines):
        p, m = l["predicted"], l["measured"]
        rows.append([l["date"], short_config(l["config"]), f"`{l['profile']}`", tok(p.get("tokens_per_s_per_gpu")),
                     tok(m["tokens_per_s_per_gpu"]), err(p.get("tokens_per_s_per_gpu"), m["tokens_per_s_per_gpu"]),
                     gib(m.get("peak_allocated_gib")), gib(m.get("host_pinned_gib")), l.get("commit") or ""])
    return out + table(["date", "configuration", "profile", "predicted tok/s", "measured", "error", "peak allocated",
                        "host pinned", "commit"], rows)


def index_checkpoint_cost(lines):
    out = ["## What a checkpoint costs (`checkpoint_cost.jsonl`)", "",
           "`tools/device/checkpoint_cost.sh`: the same run without checkpoints, saving synchronously and with "
           "`--ckpt-async`.", ""]
    rows = []
    for l in newest_first(lines):
        m = l["measured"]
        save = "" if m.get("seconds_per_save") is None else f"{m['seconds_per_save']:.1f} s"
        rows.append([l["date"], short_config(l["config"]), f"{m['mean_step_s']:.3f} s", save, l.get("commit") or ""])
    return out + table(["date", "configuration", "mean step", "per save", "commit"], rows)


def index_changes(lines):
    out = ["## Changes measured side by side (`changes.jsonl`)", "",
           "One line per change: the same plan before and after, in one device call; ratio = after ÷ before "
           "(tokens/s). [docs/CHANGELOG.md](../CHANGELOG.md) says what each change is.", ""]
    rows = []
    for l in newest_first(lines):
        p = l["predicted"].get("ratio")
        rows.append([l["date"], l["change"], l["config"], "" if p is None else f"{p:.4f}×", f"{l['measured']['ratio']:.4f}×",
                     f"`{l['profile']}`", l.get("commit") or "", l.get("note", "")])
    return out + table(["date", "change", "configuration", "predicted", "measured", "profile", "commit", "note"], rows)



def index_attention_backends(lines):
    out = ["## Attention kernels side by side (`attention_backends.jsonl`)", "",
           "`tools/device/attention_backends.py`: causal bf16 attention at a model's shape under each of SDPA's "
           "backends, forward and backward in ms; the ratio is cuDNN's time over FlashAttention-2's (the kernel "
           "`--attention documents` runs).", ""]
    rows = []
    for l in newest_first(lines):
        c, m = l["config"], l["measured"]
        cell = lambda k: (f"{m[k]['forward_ms']:.3f} / {m[k]['backward_ms']:.3f}" if k in m else "")
        ratio_ = ""
        if "cudnn" in m and "flash" in m:
            ratio_ = (f"{m['cudnn']['forward_ms'] / m['flash']['forward_ms']:.2f} / "
                      f"{m['cudnn']['backward_ms'] / m['flash']['backward_ms']:.2f}")
        rows.append([l["date"], l["machine"], f"{c['model']}: B {c['batch']}, T {c['seq']}, heads {c['heads']}/{c['kv_heads']}, "
                     f"head_dim {c['head_dim']}", cell("cudnn"), cell("flash"), cell("efficient"), ratio_, l.get("commit") or ""])
    return out + table(["date", "machine", "shape", "cuDNN fwd / bwd", "flash fwd / bwd", "efficient fwd / bwd",
                        "cuDNN ÷ flash", "commit"], rows)


def index_generic(kind, lines):
    out = [f"## {kind} (`{kind}.jsonl`)", ""]
    rows = [[l.get("date", ""), l.get("machine", ""), json.dumps(l.get("config", {})), json.dumps(l.get("predicted", {})),
             json.dumps(l.get("measured", {}))] for l in newest_first(lines)]
    return out + table(["date", "machine", "configuration", "predicted", "measured"], rows)


KINDS = [("accuracy", index_accuracy), ("fsdp2", index_fsdp2), ("plan_choice", index_plan_choice),
         ("offload_pairs", index_offload_pairs), ("offload_modes", index_offload_modes),
         ("changes", index_changes), ("checkpoint_cost", index_checkpoint_cost), ("fine_tune", index_fine_tune),
         ("attention_backends", index_attention_backends)]

HEADER = """# Measurements

Generated by `tools/results_index.py` from the JSON-lines files beside this page; do not edit by hand.
One file per experiment kind, one JSON object a line:

| field | meaning |
|---|---|
| `date`, `commit`, `machine` | when, which tree (the commit that recorded it, for measurements made before these files existed), on what (`1 x H200 (nvidia-h200)`) |
| `config` (or `request`, `plan`) | what ran: model, GPUs, sequence length, micro-batch, accumulation, checkpointed blocks, strategy, offload |
| `profile` | the hardware profile the prediction used |
| `predicted`, `measured` | the planner's figure and the run's (step time in s, memory in GiB, throughput in tokens/s per GPU) |
| `command` | what produced it, where the kind has one script (`tools/device/*.sh`) |
| `source` | where the raw run directory lay: `docs/accuracy/...` in git history, before raw runs left the tree |
| `note`, `outlier` | what to know about a line; `outlier: true` leaves a row out of the summary MAPE |

To add a measurement, append the lines the device script prints (each script's header says how) to its file,
then run `tools/results_index.py`: it rewrites this page and the tables in README.md. CTest's
`results_index_fresh` fails when either is stale.
"""


def render_index():
    out = [HEADER.rstrip("\n")]
    known = {k for k, _ in KINDS}
    for kind, fn in KINDS:
        lines = load(kind)
        if lines:
            out += [""] + fn(lines)
    for name in sorted(os.listdir(RESULTS)):
        kind, ext = os.path.splitext(name)
        if ext == ".jsonl" and kind not in known:
            out += [""] + index_generic(kind, load(kind))
    return "\n".join(out) + "\n"


MARK = re.compile(r"(<!-- results: ([a-z_0-9]+)(?: ([a-z]+=[^ ]+))? -->\n)(.*?)(<!-- /results -->)", re.S)


def render_readme(text):
    def block(m):
        kind, selector = m.group(2), m.group(3)
        if kind == "accuracy":
            body = readme_accuracy(load("accuracy"), selector or "")
        elif kind == "fsdp2":
            body = readme_fsdp2(load("fsdp2"), selector or "")
        elif kind == "fine_tune":
            body = readme_fine_tune(load("fine_tune"))
        else:
            sys.exit(f"results_index: README.md marker for unknown kind '{kind}'")
        return m.group(1) + "\n" + "\n".join(body) + "\n\n" + m.group(5)
    return MARK.sub(block, text)


def main(argv):
    check = "--check" in argv
    index = render_index()
    with open(README) as f:
        readme_old = f.read()
    readme = render_readme(readme_old)
    index_old = open(INDEX).read() if os.path.exists(INDEX) else ""
    if check:
        stale = [p for p, new, old in ((INDEX, index, index_old), (README, readme, readme_old)) if new != old]
        if stale:
            print(f"{', '.join(os.path.relpath(p, ROOT) for p in stale)} stale: run tools/results_index.py")
            return 1
        return 0
    for path, new, old in ((INDEX, index, index_old), (README, readme, readme_old)):
        if new != old:
            with open(path, "w") as f:
                f.write(new)
            print(f"results_index: wrote {os.path.relpath(path, ROOT)}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
