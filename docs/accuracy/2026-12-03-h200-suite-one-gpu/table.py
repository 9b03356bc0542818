# Prints predicted against measured step time and memory for the one-GPU rows of
# the accuracy suite, for three profiles: python3 table.py RUN_PARENT (the folder
# holding runs/a01 ... runs/a13). Needs build/tools/llmplan.
import json, subprocess, sys
d = sys.argv[1]
rows = "a01 a02 a03 a04 a05 a06 a07 a08 a09 a10 a11 a12 a13".split()
for title, prof in [("the shipped profile, measured on this machine type 2026-12-02", "h200-sxm-1gpu"),
                    ("the profile `llmplan profile` measured at the end of this call", f"{d}/h200-sxm-1gpu-measured.json"),
                    ("the two-H200 machine's profile (accuracy.sh's own table)", "h200-sxm")]:
    print(f"# {title}: llmplan compare --run {d}/runs/ROW --gpu {prof}")
    print(f"{'row':<4} {'step pred':>9} {'measured':>9} {'err':>7}  {'alloc GiB pred':>14} {'measured':>9} {'err':>7}  {'resv pred':>9} {'measured':>9} {'err':>7}")
    e = {"step": [], "alloc": [], "resv": []}
    for r in rows:
        j = json.loads(subprocess.run(["build/tools/llmplan", "compare", "--run", f"{d}/runs/{r}", "--gpu", prof, "--json"],
                                      capture_output=True, text=True, check=True).stdout)
        s, a, v = j["step_time_s"], j["peak_allocated_bytes"], j["peak_reserved_bytes"]
        g = 2**30
        print(f"{r:<4} {s['predicted']:9.3f} {s['measured']:9.3f} {100*s['error']:+6.1f}%  {a['predicted']/g:14.2f} {a['measured']/g:9.2f} "
              f"{100*a['error']:+6.2f}%  {v['predicted']/g:9.2f} {v['measured']/g:9.2f} {100*v['error']:+6.1f}%")
        e["step"].append(abs(s["error"])); e["alloc"].append(abs(a["error"])); e["resv"].append(abs(v["error"]))
    m = lambda x: 100 * sum(x) / len(x)
    print(f"MAPE / max: step {m(e['step']):.1f}% / {100*max(e['step']):.1f}% (without a13: {m(e['step'][:-1]):.1f}% / {100*max(e['step'][:-1]):.1f}%), "
          f"allocated {m(e['alloc']):.2f}% / {100*max(e['alloc']):.2f}%, reserved {m(e['resv']):.2f}% / {100*max(e['resv']):.1f}%\n")
