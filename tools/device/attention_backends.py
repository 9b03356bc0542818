#!/usr/bin/env python3
"""Causal attention's forward and backward under each SDPA backend, at a model's shape.

    tools/device/attention_backends.py [--batch 16] [--seq 2048] [--heads 9] [--kv-heads 3] [--head-dim 64]

The executor's attention is SDPA's choice (cuDNN's on Hopper with LibTorch 2.x);
this times cuDNN, FlashAttention-2 and memory-efficient attention side by side
on one GPU, bf16, K/V heads shared as the executor passes them (enable_gqa), so a
kernel choice per head width can be made from measurement. Defaults: the
SmolLM2-135M shape (issue #35), whose attention is a quarter of its step.
Needs only the machine's torch wheel; prints one line per backend.
"""
import argparse

import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel


def time_ms(fn, iters=20):
    for _ in range(3):
        fn()
    torch.cuda.synchronize()
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    for _ in range(iters):
        fn()
    end.record()
    torch.cuda.synchronize()
    return start.elapsed_time(end) / iters


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--batch", type=int, default=16)
    ap.add_argument("--seq", type=int, default=2048)
    ap.add_argument("--heads", type=int, default=9)
    ap.add_argument("--kv-heads", type=int, default=3)
    ap.add_argument("--head-dim", type=int, default=64)
    a = ap.parse_args()
    torch.manual_seed(0)
    shape = (a.batch, a.heads, a.seq, a.head_dim)
    q = torch.randn(shape, device="cuda", dtype=torch.bfloat16, requires_grad=True)
    kv_shape = (a.batch, a.kv_heads, a.seq, a.head_dim)
    k = torch.randn(kv_shape, device="cuda", dtype=torch.bfloat16, requires_grad=True)
    v = torch.randn(kv_shape, device="cuda", dtype=torch.bfloat16, requires_grad=True)
    grad = torch.randn(shape, device="cuda", dtype=torch.bfloat16)
    rep = a.heads // a.kv_heads
    # FLOPs as the planner's work model counts causal attention: half of 4·B·H·T²·D forward, 2.5x that backward.
    fwd_flops = 2 * a.batch * a.heads * a.seq * a.seq * a.head_dim
    print(f"attention B={a.batch} H={a.heads}/{a.kv_heads} T={a.seq} D={a.head_dim} bf16 causal on "
          f"{torch.cuda.get_device_name()} (torch {torch.__version__})")
    for name, backend in (("cudnn", SDPBackend.CUDNN_ATTENTION), ("flash", SDPBackend.FLASH_ATTENTION),
                          ("efficient", SDPBackend.EFFICIENT_ATTENTION)):
        # As the executor calls it (enable_gqa: shared K/V heads indexed by the
        # kernel); a backend without GQA gets K/V repeated, and says so.
        for gqa in (True, False):
            def forward():
                if gqa:
                    return F.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=rep > 1)
                return F.scaled_dot_product_attention(q, k.repeat_interleave(rep, 1), v.repeat_interleave(rep, 1),
                                                      is_causal=True)

            def forward_backward():
                q.grad = k.grad = v.grad = None
                forward().backward(grad)

            try:
                with sdpa_kernel([backend]):
                    f = time_ms(forward)
                    fb = time_ms(forward_backward)
                break
            except RuntimeError as e:
                error = str(e).splitlines()[0][:120]
                f = None
        if f is None:
            print(f"  {name:10s} not available here: {error}")
            continue
        b = fb - f
        print(f"  {name:10s} forward {f:7.3f} ms ({fwd_flops / f / 1e9:6.1f} TFLOP/s)   "
              f"backward {b:7.3f} ms ({2.5 * fwd_flops / b / 1e9:6.1f} TFLOP/s)   both {fb:7.3f} ms"
              + ("" if gqa or rep == 1 else "   (K/V repeated: no GQA in this backend)"))

if __name__ == "__main__":
    main()
