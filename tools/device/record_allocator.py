#!/usr/bin/env python3
"""Records PyTorch's CUDA caching allocator on one GPU, so that planner/allocator_model.h can be
checked against the real thing (AllocatorTraceTest in tests/planner/allocator_model_test.cc).

  python3 tools/device/record_allocator.py --out tests/data/allocator
  python3 tools/device/record_allocator.py --out "$OUT/allocator"          # through the device tool
  python3 tools/device/record_allocator.py --out DIR --only two_streams    # one sequence

Each sequence runs in a fresh Python process (the allocator starts empty, with no cuBLAS workspace
or cached segment left over from the one before) with PYTORCH_CUDA_ALLOC_CONF and PYTORCH_ALLOC_CONF
removed from its environment (default settings, as llmplan runs). It records the allocator's device
trace with torch.cuda.memory._record_memory_history(context=None: no stack frames, which keeps the
files small), runs, then writes DIR/<sequence>.json: the ordered alloc / free_requested /
free_completed / segment_alloc / segment_free / oom events, the final segments of
torch.cuda.memory._snapshot() and the peaks of torch.cuda.memory_stats(). The format is described
in tests/data/allocator/README.md. One summary line per sequence; exit status 1 if any failed.

Sequences:
  random_sizes     sizes log-uniform in 1 B .. 2 GiB, random frees (seeded), one stream
  llama_blocks     forward and backward of 4 Llama-3-8B-shaped blocks in bf16 with autograd, 2 steps
  two_streams      blocks allocated on the default stream, used on a side stream (record_stream),
                   freed while the side stream is still busy; side-stream allocations too
  memory_fraction  set_per_process_memory_fraction to ~8 GiB, random sizes until cudaMalloc fails:
                   cudaFree-all-cached-and-retry events and out-of-memory errors, caught

Standard library and torch only; runs without network access.
"""
import argparse
import json
import math
import os
import random
import subprocess
import sys
import time

FORMAT = "llmplan-allocator-trace/1"
MAX_TRACE_ENTRIES = 2_000_000  # the device trace is a ring buffer: more would overwrite the start
MAX_FILE_BYTES = 2 * 1024 * 1024
REPLAYED_ACTIONS = ("alloc", "free_requested", "free_completed", "segment_alloc", "segment_free", "oom")
KiB, MiB, GiB = 1 << 10, 1 << 20, 1 << 30


# ----------------------------------------------------------------------------------------------
# Sequences. Each takes (device, rng) and returns extra fields for the file.

def log_uniform(rng, lo, hi):
    return int(math.exp(rng.uniform(math.log(lo), math.log(hi))))


def random_sizes(torch, device, rng):
    """Sizes log-uniform in 1 B .. 2 GiB; each step frees a random live block or allocates one.
    Live bytes stay under 24 GiB, so even with the cache beside them cudaMalloc does not fail."""
    live, live_bytes = [], 0
    for _ in range(3000):
        if live and (rng.random() < 0.45 or live_bytes > 24 * GiB):
            t = live.pop(rng.randrange(len(live)))
            live_bytes -= t.numel()
            del t
        else:
            n = log_uniform(rng, 1, 2 * GiB)
            live.append(torch.empty(n, dtype=torch.uint8, device=device))
            live_bytes += n
    return {"description": "sizes log-uniform in 1 B .. 2 GiB, random frees, default stream"}


def llama_blocks(torch, device, rng):
    """Forward and backward of Llama-3-8B-shaped blocks (hidden 4096, 32 heads, 8 KV heads, head
    dim 128, SwiGLU 14336), sequence 4096, micro-batch 1, bf16, autograd; an SGD update and
    set_to_none between the 2 steps, as an optimizer would."""
    import torch.nn.functional as F
    hidden, heads, kv_heads, head_dim, ffn, seq, layers, eps = 4096, 32, 8, 128, 14336, 4096, 4, 1e-5
    bf16 = torch.bfloat16

    def weight(*shape):
        return (torch.randn(*shape, device=device, dtype=bf16) * 0.02).requires_grad_()

    blocks = [{
        "attn_norm": torch.ones(hidden, device=device, dtype=bf16, requires_grad=True),
        "wq": weight(heads * head_dim, hidden), "wk": weight(kv_heads * head_dim, hidden),
        "wv": weight(kv_heads * head_dim, hidden), "wo": weight(hidden, heads * head_dim),
        "mlp_norm": torch.ones(hidden, device=device, dtype=bf16, requires_grad=True),
        "w_gate": weight(ffn, hidden), "w_up": weight(ffn, hidden), "w_down": weight(hidden, ffn),
    } for _ in range(layers)]
    params = [p for b in blocks for p in b.values()]

    inv_freq = 1.0 / (500000.0 ** (torch.arange(0, head_dim, 2, device=device).float() / head_dim))
    angles = torch.outer(torch.arange(seq, device=device).float(), inv_freq)
    cos = torch.cat([angles, angles], -1).cos().to(bf16)
    sin = torch.cat([angles, angles], -1).sin().to(bf16)

    def rms_norm(x, w):
        xf = x.float()
        return (xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + eps)).to(bf16) * w

    def rope(x):
        half = x.shape[-1] // 2
        rotated = torch.cat([-x[..., half:], x[..., :half]], -1)
        return x * cos + rotated * sin

    def block(x, b):
        h = rms_norm(x, b["attn_norm"])
        q = F.linear(h, b["wq"]).view(1, seq, heads, head_dim).transpose(1, 2)
        k = F.linear(h, b["wk"]).view(1, seq, kv_heads, head_dim).transpose(1, 2)
        v = F.linear(h, b["wv"]).view(1, seq, kv_heads, head_dim).transpose(1, 2)
        q, k = rope(q), rope(k)
        k = k.repeat_interleave(heads // kv_heads, dim=1)
        v = v.repeat_interleave(heads // kv_heads, dim=1)
        a = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        x = x + F.linear(a.transpose(1, 2).reshape(1, seq, heads * head_dim), b["wo"])
        h = rms_norm(x, b["mlp_norm"])
        return x + F.linear(F.silu(F.linear(h, b["w_gate"])) * F.linear(h, b["w_up"]), b["w_down"])

    for _ in range(2):
        x = torch.randn(1, seq, hidden, device=device, dtype=bf16, requires_grad=True)
        out = x
        for b in blocks:
            out = block(out, b)
        loss = out.float().pow(2).mean()
        loss.backward()
        del out, loss, x
        with torch.no_grad():
            for p in params:
                p.add_(p.grad, alpha=-1e-3)
                p.grad = None
    torch.cuda.synchronize(device)
    return {"description": f"{layers} Llama-3-8B-shaped blocks, seq {seq}, bf16, forward + backward, 2 steps"}


def two_streams(torch, device, rng):
    """Blocks allocated on the default stream, written on a side stream kept busy by a matmul,
    marked with record_stream and freed at once: each waits in the allocator for its event on the
    side stream, so a same-size request right after cannot reuse it. Sometimes the side stream is
    synchronized first, so the event has completed by the next malloc. The matmul outputs are
    side-stream allocations, a pool of their own."""
    main, side = torch.cuda.current_stream(device), torch.cuda.Stream(device)
    a = torch.randn(4096, 4096, device=device, dtype=torch.bfloat16)
    side_outputs, main_live = [], []
    sizes = [500 * KiB, 3 * MiB, 12 * MiB, 40 * MiB]
    for i in range(400):
        n = rng.choice(sizes) + rng.randrange(0, 4096)
        x = torch.empty(n, dtype=torch.uint8, device=device)
        x.fill_(1)
        side.wait_stream(main)
        with torch.cuda.stream(side):
            side_outputs.append(a @ a)  # ~0.2 ms of work on the side stream
            x.add_(1)
            x.record_stream(side)
        del x
        if len(side_outputs) > 3:
            side_outputs.pop(0)
        if i % 7 == 0:
            side.synchronize()
        if i % 5 == 0:  # a burst on the default stream that would like the blocks just freed
            main_live.extend(torch.empty(rng.choice(sizes), dtype=torch.uint8, device=device) for _ in range(3))
        while len(main_live) > 12:
            main_live.pop(rng.randrange(len(main_live)))
    torch.cuda.synchronize(device)
    return {"description": "default-stream blocks used on a busy side stream (record_stream), freed at once"}


def memory_fraction(torch, device, rng):
    """torch.cuda.set_per_process_memory_fraction so the allocator may hold about 8 GiB: alloc_block
    then fails exactly when reserved + segment > the allowed bytes, as the model's capacity does.
    Random sizes from 1 KiB to 1.5 GiB; on OutOfMemoryError, two random blocks are freed."""
    total = torch.cuda.get_device_properties(device).total_memory
    fraction = 8 * GiB / total
    torch.cuda.set_per_process_memory_fraction(fraction, device)
    allowed = int(fraction * total)  # static_cast<size_t>(fraction * totalGlobalMem), as the allocator does
    live, ooms = [], 0
    for _ in range(1500):
        if live and rng.random() < 0.4:
            live.pop(rng.randrange(len(live)))
            continue
        n = log_uniform(rng, 32 * MiB, 1536 * MiB) if rng.random() < 0.7 else log_uniform(rng, KiB, 8 * MiB)
        try:
            live.append(torch.empty(n, dtype=torch.uint8, device=device))
        except torch.cuda.OutOfMemoryError:
            ooms += 1
            for _ in range(min(2, len(live))):
                live.pop(rng.randrange(len(live)))
    return {"description": "per-process memory fraction of ~8 GiB, random sizes, out-of-memory errors caught",
            "allowed_memory_bytes": allowed}


SEQUENCES = {f.__name__: f for f in (random_sizes, llama_blocks, two_streams, memory_fraction)}


# ----------------------------------------------------------------------------------------------
# Recording one sequence (in its own process).

def compact(name, snapshot, stats, extra, torch, device):
    """The snapshot and stats as the small file AllocatorTraceTest reads."""
    traces = snapshot["device_traces"]
    trace = traces[device.index] if len(traces) > device.index else []
    if len(trace) >= MAX_TRACE_ENTRIES:
        raise RuntimeError(f"{len(trace)} trace entries: the ring buffer may have wrapped; raise MAX_TRACE_ENTRIES")
    stream_ids = {}

    def stream_number(raw):
        return stream_ids.setdefault(int(raw), len(stream_ids))

    events = []
    for e in trace:
        action = e["action"]
        if action == "snapshot":
            continue
        if action not in REPLAYED_ACTIONS:
            raise RuntimeError(f"trace action {action!r}: expandable segments on? The replay models only the defaults")
        address = e["device_free"] if action == "oom" else e["addr"]
        events.append([action, int(address), int(e["size"]), stream_number(e["stream"])])

    segments = []
    for s in snapshot["segments"]:
        if s["device"] != device.index:
            continue
        segments.append({
            "address": int(s["address"]), "total_size": int(s["total_size"]),
            "allocated_size": int(s["allocated_size"]), "active_size": int(s["active_size"]),
            "stream": stream_number(s["stream"]), "segment_type": s["segment_type"],
            "blocks": [[int(b["size"]), int(b["requested_size"]), b["state"]] for b in s["blocks"]],
        })

    stat_keys = ("allocated_bytes.all.peak", "reserved_bytes.all.peak", "allocated_bytes.all.current",
                 "reserved_bytes.all.current", "segment.all.current", "num_alloc_retries", "num_ooms",
                 "num_sync_all_streams")
    settings = snapshot.get("allocator_settings", {})
    return {
        "format": FORMAT,
        "sequence": name,
        "description": extra.get("description", ""),
        "torch_version": torch.__version__,
        "cuda_version": torch.version.cuda,
        "device_name": torch.cuda.get_device_name(device),
        "device_total_bytes": torch.cuda.get_device_properties(device).total_memory,
        "allowed_memory_bytes": extra.get("allowed_memory_bytes", 0),
        "allocator_settings": {k: v for k, v in settings.items() if isinstance(v, (bool, int, float, str))},
        "streams": [raw for raw, _ in sorted(stream_ids.items(), key=lambda kv: kv[1])],
        "stats": {k: int(stats.get(k, 0)) for k in stat_keys},
        "segments": segments,
        "events": events,
    }


def write_trace(doc, path):
    """JSON with one event per line, so a diff of two recordings reads event by event."""
    head = {k: v for k, v in doc.items() if k != "events"}
    text = json.dumps(head, separators=(",", ":"))[:-1]
    text += ',\n"events":[\n' + ",\n".join(json.dumps(e, separators=(",", ":")) for e in doc["events"]) + "\n]}\n"
    tmp = path + ".tmp"
    with open(tmp, "w") as f:
        f.write(text)
    os.replace(tmp, path)
    return len(text)


def record(name, out_dir, seed):
    import torch
    if not torch.cuda.is_available():
        raise RuntimeError("no CUDA device")
    device = torch.device("cuda", 0)
    torch.cuda.set_device(device)
    torch.manual_seed(seed)
    torch.cuda.init()
    if torch.cuda.memory_reserved(device) != 0:
        raise RuntimeError("the allocator is not empty at the start")
    torch.cuda.memory._record_memory_history(enabled="all", context=None, stacks="python",
                                             max_entries=MAX_TRACE_ENTRIES)
    torch.cuda.reset_peak_memory_stats(device)
    torch.cuda.reset_accumulated_memory_stats(device)

    start = time.time()
    extra = SEQUENCES[name](torch, device, random.Random(f"{name}:{seed}"))
    torch.cuda.synchronize(device)
    snapshot = torch.cuda.memory._snapshot()
    stats = torch.cuda.memory_stats(device)
    torch.cuda.memory._record_memory_history(enabled=None)

    doc = compact(name, snapshot, stats, extra, torch, device)
    if doc["allocator_settings"].get("expandable_segments"):
        raise RuntimeError("expandable segments are on; the model covers the default settings only")
    if not doc["allowed_memory_bytes"] and doc["stats"]["num_alloc_retries"]:
        # The GPU itself ran out: how much it had free is not in the trace, so no replay can follow.
        raise RuntimeError("cudaMalloc failed without a memory fraction set; is another process using the GPU?")
    path = os.path.join(out_dir, f"{name}.json")
    size = write_trace(doc, path)
    s = doc["stats"]
    print(f"{name}: {len(doc['events'])} events in {time.time() - start:.1f} s, "
          f"peak allocated {s['allocated_bytes.all.peak'] / GiB:.2f} GiB, "
          f"peak reserved {s['reserved_bytes.all.peak'] / GiB:.2f} GiB, {len(doc['segments'])} segments at the end, "
          f"{s['num_alloc_retries']} retries, {s['num_ooms']} OOMs -> {path} ({size / 1024:.0f} KiB)", flush=True)
    if size > MAX_FILE_BYTES:
        print(f"{name}: warning: {size} bytes, over the {MAX_FILE_BYTES} aimed at", flush=True)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", required=True, help="folder for the <sequence>.json files")
    ap.add_argument("--only", choices=sorted(SEQUENCES), help="record this sequence in this process")
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args()
    os.makedirs(args.out, exist_ok=True)
    if args.only:
        record(args.only, args.out, args.seed)
        return 0

    env = {k: v for k, v in os.environ.items() if k not in ("PYTORCH_CUDA_ALLOC_CONF", "PYTORCH_ALLOC_CONF")}
    failed = []
    for name in SEQUENCES:
        r = subprocess.run([sys.executable, os.path.abspath(__file__), "--out", args.out, "--only", name,
                            "--seed", str(args.seed)], env=env)
        if r.returncode != 0:
            print(f"{name}: FAILED (exit status {r.returncode})", flush=True)
            failed.append(name)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
