import torch
torch.cuda.init()
for rows, cols in [(1056, 2048), (1056, 3072), (1056, 896)]:
    p = torch.randn(rows, cols, device="cuda")
    torch.cuda.synchronize()
    torch.cuda.reset_peak_memory_stats()
    base = torch.cuda.memory_allocated()
    s = p.sum(0)
    torch.cuda.synchronize()
    peak1 = torch.cuda.max_memory_allocated() - base
    torch.cuda.reset_peak_memory_stats()
    base2 = torch.cuda.memory_allocated()
    w = s.to(torch.bfloat16)
    peak2 = torch.cuda.max_memory_allocated() - base2
    print(f"[{rows},{cols}] sum(0) peak +{peak1/2**20:.4f} MiB (partials {rows*cols*4/2**20:.4f} MiB); to(bf16) +{peak2/2**20:.4f} MiB")
