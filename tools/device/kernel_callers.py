#!/usr/bin/env python3
"""Which host ops launched the kernels of a traced step.

`llmplan kernels` says how much device time each kernel took; this says who
asked for it. For every device activity whose name contains one of PATTERNS
(all of them when none is given) it follows the CUDA runtime call with the
same correlation id back to the host thread that made it, and names the chain
of host ops (aten ops, autograd nodes, llmplan's functions) open around that
call, innermost last. Groups are printed by total device time.

  tools/device/kernel_callers.py RUN/kernel_trace.json [PATTERN ...] [--depth N] [--top N]

Reads the Chrome trace `llmplan run --kernel-trace` (or torch.profiler) writes;
needs only Python's standard library.
"""
import argparse
import bisect
import collections
import json
import sys

DEVICE_CATEGORIES = {"kernel", "gpu_memcpy", "gpu_memset"}
HOST_CATEGORIES = {"cpu_op", "user_annotation", "python_function"}


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("trace")
    ap.add_argument("patterns", nargs="*", help="substrings of kernel names (case-insensitive)")
    ap.add_argument("--depth", type=int, default=3, help="host ops named per chain, innermost last")
    ap.add_argument("--top", type=int, default=25)
    args = ap.parse_args()
    try:
        with open(args.trace) as f:
            trace = json.load(f)
    except (OSError, ValueError) as e:
        sys.exit(f"kernel_callers: cannot read {args.trace}: {e}")
    events = trace["traceEvents"] if isinstance(trace, dict) else trace

    launches = {}  # correlation id -> (tid, ts) of the runtime call
    host_ops = collections.defaultdict(list)  # tid -> [(ts, end, name)]
    kernels = []
    for e in events:
        if not isinstance(e, dict) or e.get("ph") != "X":
            continue
        cat = str(e.get("cat", "")).lower()
        a = e.get("args", {}) or {}
        if cat in ("cuda_runtime", "cuda_driver") and "correlation" in a:
            launches[a["correlation"]] = (e.get("tid"), float(e["ts"]))
        elif cat in HOST_CATEGORIES:
            host_ops[e.get("tid")].append((float(e["ts"]), float(e["ts"]) + float(e.get("dur", 0)), e.get("name", "")))
        elif cat in DEVICE_CATEGORIES:
            kernels.append(e)
    starts = {}
    for tid, ops in host_ops.items():
        ops.sort()
        starts[tid] = [o[0] for o in ops]

    def chain(tid, ts):
        ops = host_ops.get(tid, [])
        i = bisect.bisect_right(starts.get(tid, []), ts)
        # Open ops: started before ts, end after it. Scan back a bounded way.
        open_ops = [o for o in ops[max(0, i - 400):i] if o[1] >= ts]
        return tuple(o[2] for o in open_ops[-args.depth:]) or ("(no host op)",)

    patterns = [p.lower() for p in args.patterns]
    groups = collections.defaultdict(lambda: [0, 0.0])
    total = 0.0
    for k in kernels:
        name = k.get("name", "")
        if patterns and not any(p in name.lower() for p in patterns):
            continue
        corr = (k.get("args", {}) or {}).get("correlation")
        where = chain(*launches[corr]) if corr in launches else ("(launch not traced)",)
        g = groups[(name[:70], where)]
        g[0] += 1
        g[1] += float(k.get("dur", 0))
        total += float(k.get("dur", 0))
    print(f"{sum(g[0] for g in groups.values())} activities, {total / 1e3:.2f} ms")
    for (name, where), (count, us) in sorted(groups.items(), key=lambda kv: -kv[1][1])[: args.top]:
        print(f"{count:6d} {us / 1e3:8.2f} ms  {name}\n{'':17s}<- {' > '.join(where)}")


if __name__ == "__main__":
    main()
