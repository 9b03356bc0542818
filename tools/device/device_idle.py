#!/usr/bin/env python3
"""How much of a traced step the GPU sat idle, and why: what CUDA graphs could gain.

`llmplan kernels` sums the device time of a traced step by kernel class; this
asks the other question: between the step's first and last device activity,
how long was no kernel, copy or memset running, and how are those idle
stretches spread. Many short gaps (a few microseconds each, between
back-to-back kernels) are the host issuing kernels no faster than the GPU runs
them — what replaying a captured graph removes; a few long ones are waits
(a host sync, the data loader) that graphs do not touch.

  tools/device/device_idle.py RUN/kernel_trace.json [--json]

Reads the Chrome trace `llmplan run --kernel-trace` (or torch.profiler) writes;
needs only Python's standard library. The profiler's own cost per launch
lengthens host issue under tracing: hold the traced step's time against the
untraced steps' (metrics.jsonl) before reading its gaps as the step's.
"""
import argparse
import json
import sys

DEVICE_CATEGORIES = {"kernel", "gpu_memcpy", "gpu_memset"}
# Idle stretches by length, in microseconds: the upper bound of each bucket.
BUCKETS_US = (2, 5, 10, 20, 50, 100, 1000, float("inf"))


def device_intervals(trace):
    events = trace["traceEvents"] if isinstance(trace, dict) else trace
    out = []
    for e in events:
        if e.get("ph") == "X" and e.get("cat") in DEVICE_CATEGORIES and e.get("dur") is not None:
            out.append((float(e["ts"]), float(e["ts"]) + float(e["dur"])))
    return sorted(out)


def census(intervals):
    """Span, busy time (the union of the activities), and the idle stretches between them."""
    if not intervals:
        return None
    busy, gaps = 0.0, []
    start, end = intervals[0]
    for s, e in intervals[1:]:
        if s > end:
            busy += end - start
            gaps.append(s - end)
            start, end = s, e
        else:
            end = max(end, e)
    busy += end - start
    span = intervals[-1][1] - intervals[0][0]
    span = max(span, max(e for _, e in intervals) - intervals[0][0])
    buckets, lo = [], 0.0
    for hi in BUCKETS_US:
        inside = [g for g in gaps if lo < g <= hi or (lo == 0 and g == 0)]
        buckets.append(dict(up_to_us=None if hi == float("inf") else hi, gaps=len(inside), idle_us=round(sum(inside), 1)))
        lo = hi
    return dict(activities=len(intervals), span_us=round(span, 1), busy_us=round(busy, 1),
                idle_us=round(span - busy, 1), idle_fraction=round((span - busy) / span, 4) if span > 0 else 0.0,
                gaps=len(gaps), buckets=buckets)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("trace")
    ap.add_argument("--json", action="store_true")
    a = ap.parse_args()
    try:
        trace = json.load(open(a.trace))
    except (OSError, json.JSONDecodeError) as e:
        sys.exit(f"device_idle: cannot read {a.trace}: {e}")
    c = census(device_intervals(trace))
    if c is None:
        sys.exit(f"device_idle: {a.trace} holds no device activity (kernels, copies, memsets)")
    if a.json:
        print(json.dumps(c))
        return
    print(f"{a.trace}: {c['activities']} device activities over {c['span_us'] / 1000:.2f} ms; "
          f"busy {c['busy_us'] / 1000:.2f} ms, idle {c['idle_us'] / 1000:.2f} ms ({100 * c['idle_fraction']:.1f}%) "
          f"in {c['gaps']} gaps")
    lo = 0
    for b in c["buckets"]:
        hi = "longer" if b["up_to_us"] is None else f"<= {b['up_to_us']:g} us"
        label = f"> {lo:g} us" if b["up_to_us"] is None else hi
        print(f"  gaps {label:>10}: {b['gaps']:6d}, {b['idle_us'] / 1000:8.2f} ms idle")
        lo = b["up_to_us"] or lo


if __name__ == "__main__":
    main()
