#!/usr/bin/env python3
"""Turns one device call's output into lines of docs/results/KIND.jsonl.

    results_lines.py accuracy RUNS_DIR --llmplan BIN [--profile NAME] [--set NAME] [--command CMD]
    results_lines.py fsdp2 COMPARE_DIR --plan PLAN [--command CMD]
    results_lines.py plan_choice WORK_DIR [--command CMD]
    results_lines.py offload_pairs WORK_DIR [--command CMD]
    results_lines.py fine_tune WORK_DIR --llmplan BIN [--profile NAME] [--set NAME] [--command CMD]

Prints JSON lines on stdout; the device scripts (accuracy.sh, compare_fsdp2.sh,
plan_choice.sh, offload_pairs.sh, fine_tune.sh) call it at their end and write its output to
$OUT/KIND.results.jsonl. Back here, append that file to docs/results/KIND.jsonl
and run tools/results_index.py. Every line carries `date` (UTC), `commit`
(LLMPLAN_COMMIT, else `git rev-parse --short HEAD` where the tree is a checkout,
else null) and `machine` (LLMPLAN_MACHINE, else nvidia-smi's GPU count and name).
"""
import argparse
import datetime
import json
import os
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
GIB = 2**30


def common(command):
    commit = os.environ.get("LLMPLAN_COMMIT")
    if not commit:
        try:
            commit = subprocess.run(["git", "-C", ROOT, "rev-parse", "--short", "HEAD"], capture_output=True,
                                    text=True, check=True).stdout.strip() or None
        except (OSError, subprocess.CalledProcessError):
            commit = None
    try:
        names = subprocess.run(["nvidia-smi", "--query-gpu=name", "--format=csv,noheader"], capture_output=True,
                               text=True, check=True).stdout.split("\n")
        names = [n.strip().replace("NVIDIA ", "") for n in names if n.strip()]
        machine = f"{len(names)} x {names[0]}" if names else "cpu"
    except (OSError, subprocess.CalledProcessError):
        machine = "cpu"
    machine = os.environ.get("LLMPLAN_MACHINE", machine)
    d = dict(date=datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d"), commit=commit, machine=machine)
    if command:
        d["command"] = command
    return d


def plan_of(path):
    j = json.load(open(path))
    return j.get("plan", j)


def profile_name(plan):
    """The profile's name; a plan made with --gpu PATH names the file's profile."""
    prof = plan.get("profile")
    if isinstance(prof, dict):
        return prof.get("name")
    if isinstance(prof, str) and prof.endswith(".json"):
        try:
            return json.load(open(prof)).get("name") or os.path.basename(prof)[:-5]
        except (OSError, ValueError):
            return os.path.basename(prof)[:-5]
    return prof


def checkpointed(plan):
    layers = plan.get("checkpoint_layers", [])
    n = plan.get("model", {}).get("num_hidden_layers")
    if not layers:
        return "none"
    if n and len(layers) == n:
        return "all"
    return ",".join(str(l) for l in layers)


def config_of(plan, model=None):
    c = dict(model=model or plan.get("model", {}).get("name"), gpus=plan.get("gpus"), seq=plan.get("seq_len"),
             micro_batch=plan.get("micro_batch"), grad_accum=plan.get("grad_accum"), checkpointed=checkpointed(plan),
             strategy=plan.get("strategy"), offload=plan.get("offload"))
    if plan.get("offload", "none") != "none" and plan.get("offload_staging"):
        c["offload_staging"] = plan["offload_staging"]
    if plan.get("loss_chunk_tokens"):
        c["loss_chunk"] = plan["loss_chunk_tokens"]
    return c


def suite_rows():
    rows = {}
    for line in open(os.path.join(ROOT, "tools", "device", "accuracy", "suite.txt")):
        if line.strip() and not line.startswith("#"):
            n, gpus, model, seq, mb, ga, ck, st, off = line.split()
            rows[n] = dict(gpus=int(gpus), model=model, seq=int(seq), micro_batch=int(mb), grad_accum=int(ga),
                           checkpointed=ck, strategy=st, offload=off)
    return rows


def accuracy(a, base):
    suite = suite_rows()
    for row in sorted(os.listdir(a.dir)):
        run = os.path.join(a.dir, row)
        if row not in suite or not os.path.exists(os.path.join(run, "metrics.jsonl")):
            continue
        cmd = [a.llmplan, "compare", "--run", run, "--json"] + (["--gpu", a.profile] if a.profile else [])
        r = subprocess.run(cmd, capture_output=True, text=True)
        if r.returncode != 0:
            print(f"results_lines: {row}: llmplan compare failed: {r.stderr.strip()[:200]}", file=sys.stderr)
            continue
        j = json.loads(r.stdout)
        s, al, rs = j["step_time_s"], j["peak_allocated_bytes"], j["peak_reserved_bytes"]
        profile = a.profile or profile_name(plan_of(os.path.join(run, "plan.json")))
        yield dict(base, set=a.set or f"{base['date']}-accuracy", profile=profile, row=row, config=suite[row],
                   predicted=dict(step_s=round(s["predicted"], 5), peak_allocated_gib=round(al["predicted"] / GIB, 4),
                                  peak_reserved_gib=round(rs["predicted"] / GIB, 4)),
                   measured=dict(step_s=round(s["measured"], 5), peak_allocated_gib=round(al["measured"] / GIB, 4),
                                 peak_reserved_gib=round(rs["measured"] / GIB, 4)))


def fsdp2(a, base):
    measured, predicted = {}, {}
    s = os.path.join(a.dir, "llmplan_run", "summary.json")
    if os.path.exists(s):
        j = json.load(open(s))
        measured["llmplan"] = dict(tokens_per_s_per_gpu=round(j["mean_tokens_per_s_per_gpu"]), mfu=round(j["mean_mfu"], 4),
                                   peak_allocated_gib=round(j["peak_allocated_bytes"] / GIB, 4))
        if j.get("predicted_tokens_per_s_per_gpu"):
            predicted["llmplan_tokens_per_s_per_gpu"] = round(j["predicted_tokens_per_s_per_gpu"])
    for mode in ("eager", "compiled"):
        p = os.path.join(a.dir, f"fsdp2_{mode}.json")
        if os.path.exists(p):
            j = json.load(open(p))
            measured[f"fsdp2_{mode}"] = dict(tokens_per_s_per_gpu=round(j["tokens_per_s_per_gpu"]), mfu=round(j["mfu"], 4),
                                             peak_allocated_gib=round(j["peak_allocated_bytes"] / GIB, 4))
    plan = plan_of(a.plan)
    rel = os.path.relpath(os.path.abspath(a.plan), ROOT)
    yield dict(base, config=config_of(plan), plan=rel, predicted=predicted, measured=measured)


def plan_choice(a, base):
    names = ["choice"] + sorted((n[:-len(".estimate.json")] for n in os.listdir(a.dir)
                                 if n.startswith("alt") and n.endswith(".estimate.json")), key=lambda n: int(n[3:]))
    for name in names:
        est = os.path.join(a.dir, name + ".estimate.json")
        if not os.path.exists(est):
            continue
        e = json.load(open(est))
        plan = e["plan"]
        summary = os.path.join(a.dir, name, "summary.json")
        measured = {}
        if os.path.exists(summary):
            measured["tokens_per_s_per_gpu"] = round(json.load(open(summary))["mean_tokens_per_s_per_gpu"])
        request = dict(model=plan.get("model", {}).get("name"), gpus=plan["gpus"], seq=plan["seq_len"],
                       global_batch=plan.get("global_batch"))
        c = config_of(plan)
        for k in ("model", "gpus", "seq"):
            c.pop(k, None)
        yield dict(base, profile=profile_name(plan), request=request,
                   role="choice" if name == "choice" else f"alternative {name[3:]}", plan=c,
                   predicted=dict(tokens_per_s_per_gpu=round(e["throughput"]["tokens_per_s_per_gpu"])), measured=measured)


def offload_pairs(a, base):
    runs = sorted((d for d in os.listdir(a.dir) if os.path.exists(os.path.join(a.dir, d, "summary.json"))),
                  key=lambda d: os.path.getmtime(os.path.join(a.dir, d, "summary.json")))
    for run in runs:
        plan = plan_of(os.path.join(a.dir, run, "plan.json"))
        s = json.load(open(os.path.join(a.dir, run, "summary.json")))
        c = config_of(plan)
        staging = c.pop("offload_staging", plan.get("offload_staging"))
        yield dict(base, profile=profile_name(plan), config=c, run=run, form=run.rsplit("_", 1)[0], offload_staging=staging,
                   predicted=dict(tokens_per_s_per_gpu=round(s.get("predicted_tokens_per_s_per_gpu") or 0) or None),
                   measured=dict(tokens_per_s_per_gpu=round(s["mean_tokens_per_s_per_gpu"]),
                                 peak_allocated_gib=round(s["peak_allocated_bytes"] / GIB, 4)))


def fine_tune(a, base):
    """One line per fine-tuning run WORK_DIR/ft-ATTENTION (fine_tune.sh): the
    step and memory predicted against measured (llmplan compare), the
    attention's span and priced share of a window's work, the held-out loss."""
    for name in sorted(os.listdir(a.dir)):
        run = os.path.join(a.dir, name)
        if not name.startswith("ft-") or not os.path.exists(os.path.join(run, "summary.json")):
            continue
        cmd = [a.llmplan, "compare", "--run", run, "--json"] + (["--gpu", a.profile] if a.profile else [])
        r = subprocess.run(cmd, capture_output=True, text=True)
        if r.returncode != 0:
            print(f"results_lines: {name}: llmplan compare failed: {r.stderr.strip()[:200]}", file=sys.stderr)
            continue
        j = json.loads(r.stdout)
        plan = plan_of(os.path.join(run, "plan.json"))
        summary = json.load(open(os.path.join(run, "summary.json")))
        s, al, rs = j["step_time_s"], j["peak_allocated_bytes"], j["peak_reserved_bytes"]
        c = config_of(plan)
        c["attention"] = plan.get("attention", "window")
        if c["attention"] == "documents":
            c["attention_work"] = round(plan.get("document_attention_work", 1.0), 4)
        tokens = plan["micro_batch"] * plan["grad_accum"] * plan["seq_len"]
        best = (summary.get("evaluation") or {}).get("best") or {}
        measured = dict(step_s=round(s["measured"], 5), tokens_per_s_per_gpu=round(tokens / s["measured"]),
                        peak_allocated_gib=round(al["measured"] / GIB, 4), peak_reserved_gib=round(rs["measured"] / GIB, 4),
                        steps=summary.get("steps"), first_loss=round(summary.get("first_loss", 0), 4),
                        final_loss=round(summary.get("final_loss", 0), 4))
        if best:
            measured.update(eval_loss=round(best["loss"], 4), eval_step=best["step"])
        yield dict(base, set=a.set or f"{base['date']}-fine-tune", profile=a.profile or profile_name(plan),
                   run=name[len("ft-"):], config=c,
                   predicted=dict(step_s=round(s["predicted"], 5), tokens_per_s_per_gpu=round(tokens / s["predicted"]),
                                  peak_allocated_gib=round(al["predicted"] / GIB, 4),
                                  peak_reserved_gib=round(rs["predicted"] / GIB, 4)),
                   measured=measured)


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("kind", choices=["accuracy", "fsdp2", "plan_choice", "offload_pairs", "fine_tune"])
    p.add_argument("dir")
    p.add_argument("--llmplan", default=os.path.join(ROOT, "build-gpu", "tools", "llmplan"))
    p.add_argument("--profile")
    p.add_argument("--set")
    p.add_argument("--plan")
    p.add_argument("--command")
    a = p.parse_args()
    base = common(a.command)
    for line in {"accuracy": accuracy, "fsdp2": fsdp2, "plan_choice": plan_choice, "offload_pairs": offload_pairs,
                 "fine_tune": fine_tune}[a.kind](a, base):
        print(json.dumps(line))


if __name__ == "__main__":
    main()
