#!/usr/bin/env python3
"""PyTorch FSDP2 (fully_shard) reference: trains the model of an llmplan plan file the way
torchtitan would, and prints one JSON line in the form of shared/facts/h200-measured.md, so
llmplan's executor can be compared with PyTorch on the same machine and configuration.

  torchrun --nproc-per-node 2 tools/device/fsdp2_reference.py --plan plan.json --steps 13 --warmup 3
  python3 tools/device/fsdp2_reference.py --plan plan.json            # 1 GPU, no torchrun needed
  python3 tools/device/fsdp2_reference.py --plan plan.json --device cpu --steps 3 --warmup 1

Model: Llama-style decoder (RMSNorm, RoPE in HF's rotate_half layout, GQA, SwiGLU, SDPA causal,
tied or untied head), the same maths as executor/model/llama_model.cc; RMSNorm is PyTorch's own
F.rms_norm (--rms-norm fused, the default: what an expert writes) or HF's statements (--rms-norm hf). Each block and the root
are fully_shard-ed with MixedPrecisionPolicy(param_dtype=bf16, reduce_dtype=fp32); blocks listed
in the plan's checkpoint_layers are wrapped with activation checkpointing (before torch.compile
and fully_shard, as torchtitan orders them). Fused AdamW with the plan's hyper-parameters,
warm-up + cosine learning rate and global-norm clipping as llmplan's optimizer. Random tokens,
seeded per rank — or, with --data, llmplan's own sample stream from the same token file
(the windows and seeded shuffle of executor/data/batch_loader.h, rank r reading rows
r*micro_batch.. of every global micro-batch), so the two stacks see the same tokens.

Same start: --init-out DIR writes the initial weights as a Hugging Face directory
(model.safetensors under LlamaForCausalLM's names, config.json) that `llmplan run --init-from
DIR` loads; with the same --data both then train the same model on the same tokens and their
loss curves can be held against each other (tools/device/loss_agreement.sh).
--kernel-trace STEP exports that step's torch.profiler Chrome trace (--kernel-trace-out), which
`llmplan kernels` sums up as it does llmplan's own.

Measurement: --warmup steps untimed, then the rest timed one by one (cuda synchronize + wall
clock). tokens/s/GPU = micro_batch * grad_accum * seq_len / mean timed step. MFU = tokens/s/GPU *
(6 * N_non_embedding + 12 * L * H * Q * T) / --peak-flops (989e12: H100/H200 SXM dense bf16),
with N_non_embedding = all parameters minus the input embedding unless it is tied. Peak memory =
torch.cuda.max_memory_allocated / max_memory_reserved over the whole run, the maximum over ranks.

Standard library and torch only; runs without network access.
"""
import os

# NVLink multicast stays off on the lent GPU machines (it can take shared GPUs out of service).
os.environ.setdefault("NCCL_NVLS_ENABLE", "0")
os.environ.setdefault("TORCH_SYMM_MEM_DISABLE_MULTICAST", "1")

import argparse
import json
import math
import resource
import socket
import sys
import time

import torch
import torch.distributed as dist
import torch.nn as nn
import torch.nn.functional as F

H100_BF16_PEAK = 989e12


# ----------------------------------------------------------------------------------------------
# Configuration: the plan file, overridden by flags.

def parse_layer_list(text, layers):
    """'none', 'all', or '0,3-5' -> sorted block indices (as llmplan's ParseLayerList)."""
    text = text.strip()
    if text in ("", "none"):
        return []
    if text == "all":
        return list(range(layers))
    out = set()
    for part in text.split(","):
        if "-" in part:
            lo, hi = part.split("-", 1)
            out.update(range(int(lo), int(hi) + 1))
        else:
            out.add(int(part))
    bad = [i for i in out if not 0 <= i < layers]
    if bad:
        raise SystemExit(f"fsdp2_reference: checkpoint layer {bad[0]} out of range 0..{layers - 1}")
    return sorted(out)


def load_config(args):
    plan = {}
    if args.plan:
        with open(args.plan) as f:
            plan = json.load(f)
        # `llmplan estimate --json` output carries the plan under "plan".
        if "model" not in plan and isinstance(plan.get("plan"), dict):
            plan = plan["plan"]
    model = dict(plan.get("model", {}))
    for key, flag in [("hidden_size", args.hidden), ("intermediate_size", args.intermediate),
                      ("num_attention_heads", args.heads), ("num_key_value_heads", args.kv_heads),
                      ("head_dim", args.head_dim), ("num_hidden_layers", args.layers),
                      ("vocab_size", args.vocab), ("rope_theta", args.rope_theta)]:
        if flag is not None:
            model[key] = flag
    if args.tied is not None:
        model["tie_word_embeddings"] = args.tied == "yes"
    for key in ("hidden_size", "intermediate_size", "num_attention_heads", "num_hidden_layers", "vocab_size"):
        if key not in model:
            raise SystemExit(f"fsdp2_reference: model field '{key}' missing: give --plan or --{key} flags")
    model.setdefault("num_key_value_heads", model["num_attention_heads"])
    model.setdefault("head_dim", model["hidden_size"] // model["num_attention_heads"])
    model.setdefault("tie_word_embeddings", False)
    model.setdefault("rope_theta", 10000.0)
    model.setdefault("rms_norm_eps", 1e-5)
    model.setdefault("attention_bias", False)  # Qwen2's q/k/v biases

    opt = {"lr": 3e-4, "beta1": 0.9, "beta2": 0.95, "eps": 1e-8, "weight_decay": 0.1, "grad_clip": 1.0,
           "warmup_steps": 100, "decay_steps": 10000, "min_lr_ratio": 0.1}
    opt.update(plan.get("optimizer", {}))

    def pick(flag, key, default):
        return flag if flag is not None else plan.get(key, default)

    layers = int(model["num_hidden_layers"])
    ckpt = plan.get("checkpoint_layers", [])
    if args.checkpoint is not None:
        ckpt = parse_layer_list(args.checkpoint, layers)
    offload = "optimizer+params" if args.cpu_offload else plan.get("offload", "none")
    return {
        "model": model,
        "optimizer": opt,
        "seq_len": int(pick(args.seq_len, "seq_len", 4096)),
        "micro_batch": int(pick(args.micro_batch, "micro_batch", 1)),
        "grad_accum": int(pick(args.grad_accum, "grad_accum", 1)),
        "checkpoint_layers": sorted(int(i) for i in ckpt),
        "offload": offload,
        "strategy": plan.get("strategy", "full_shard"),
        "shard_group_size": int(plan.get("shard_group_size", 0) or 0),
        "gpus": int(plan.get("gpus", 0) or 0),
        "seed": int(pick(args.seed, "seed", 1234)),
    }


# ----------------------------------------------------------------------------------------------
# The model (same maths as executor/model/llama_model.cc).

# "fused" (the default, what an expert writes): F.rms_norm, PyTorch's own RMSNorm (one fused
# kernel on CUDA in recent releases, fp32 statistics inside). "hf": HF LlamaRMSNorm's statements,
# the same maths as llmplan's composite form, several kernels in eager mode.
RMS_NORM_MODE = "fused"


def rms_norm(x, weight, eps):
    if RMS_NORM_MODE == "fused" and hasattr(F, "rms_norm"):
        return F.rms_norm(x, (x.shape[-1],), weight.to(x.dtype), eps)
    # In fp32, then back: bf16 mean-of-squares loses too much (as HF's LlamaRMSNorm).
    xf = x.float()
    return weight * (xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + eps)).to(x.dtype)


class RMSNorm(nn.Module):
    def __init__(self, dim, eps):
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(dim))

    def forward(self, x):
        return rms_norm(x, self.weight, self.eps)


def rope_tables(head_dim, seq_len, theta, device):
    inv_freq = theta ** (-torch.arange(0, head_dim, 2, dtype=torch.float64, device=device) / head_dim)
    freqs = torch.outer(torch.arange(seq_len, dtype=torch.float64, device=device), inv_freq)
    emb = torch.cat([freqs, freqs], dim=-1)  # rotate_half layout: the two halves rotate together
    return emb.cos().float(), emb.sin().float()


def apply_rope(x, cos, sin):
    x1, x2 = x.chunk(2, dim=-1)
    return x * cos + torch.cat([-x2, x1], dim=-1) * sin


# How GQA's K/V heads meet the query heads: "repeat" materialises them (torchtitan's repeat_kv;
# every SDPA backend takes it), "sdpa" passes enable_gqa=True (torch >= 2.5; backends vary).
GQA_MODE = "repeat"


class Block(nn.Module):
    def __init__(self, m):
        super().__init__()
        h, hd = m["hidden_size"], m["head_dim"]
        self.nh, self.nkv, self.hd = m["num_attention_heads"], m["num_key_value_heads"], hd
        bias = bool(m["attention_bias"])
        self.input_layernorm = RMSNorm(h, m["rms_norm_eps"])
        self.q_proj = nn.Linear(h, self.nh * hd, bias=bias)
        self.k_proj = nn.Linear(h, self.nkv * hd, bias=bias)
        self.v_proj = nn.Linear(h, self.nkv * hd, bias=bias)
        self.o_proj = nn.Linear(self.nh * hd, h, bias=False)
        self.post_attention_layernorm = RMSNorm(h, m["rms_norm_eps"])
        self.gate_proj = nn.Linear(h, m["intermediate_size"], bias=False)
        self.up_proj = nn.Linear(h, m["intermediate_size"], bias=False)
        self.down_proj = nn.Linear(m["intermediate_size"], h, bias=False)

    def forward(self, x, cos, sin):
        b, t, _ = x.shape
        hn = self.input_layernorm(x)
        q = self.q_proj(hn).view(b, t, self.nh, self.hd).transpose(1, 2)
        k = self.k_proj(hn).view(b, t, self.nkv, self.hd).transpose(1, 2)
        v = self.v_proj(hn).view(b, t, self.nkv, self.hd).transpose(1, 2)
        cos, sin = cos[:t].to(q.dtype), sin[:t].to(q.dtype)
        q, k = apply_rope(q, cos, sin), apply_rope(k, cos, sin)
        if self.nkv == self.nh:
            y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        elif GQA_MODE == "sdpa":
            y = F.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=True)
        else:
            rep = self.nh // self.nkv
            y = F.scaled_dot_product_attention(q, k.repeat_interleave(rep, 1), v.repeat_interleave(rep, 1),
                                               is_causal=True)
        h = x + self.o_proj(y.transpose(1, 2).reshape(b, t, self.nh * self.hd))
        mn = self.post_attention_layernorm(h)
        return h + self.down_proj(F.silu(self.gate_proj(mn)) * self.up_proj(mn))


class Decoder(nn.Module):
    def __init__(self, m):
        super().__init__()
        self.m = m
        self.embed_tokens = nn.Embedding(m["vocab_size"], m["hidden_size"])
        self.layers = nn.ModuleList(Block(m) for _ in range(m["num_hidden_layers"]))
        self.norm = RMSNorm(m["hidden_size"], m["rms_norm_eps"])
        self.lm_head = nn.Linear(m["hidden_size"], m["vocab_size"], bias=False)
        if m["tie_word_embeddings"]:
            self.lm_head.weight = self.embed_tokens.weight
        # Plain attributes, not buffers: fully_shard and to_empty leave them alone.
        self.rope_cos = self.rope_sin = None

    def init_rope(self, seq_len, device):
        self.rope_cos, self.rope_sin = rope_tables(self.m["head_dim"], seq_len, self.m["rope_theta"], device)

    @torch.no_grad()
    def init_weights(self):
        for mod in self.modules():
            if isinstance(mod, (nn.Linear, nn.Embedding)):
                nn.init.normal_(mod.weight, std=0.02)
                if getattr(mod, "bias", None) is not None:
                    nn.init.zeros_(mod.bias)
            elif isinstance(mod, RMSNorm):
                nn.init.ones_(mod.weight)

    def forward(self, tokens):
        x = self.embed_tokens(tokens)
        for block in self.layers:
            x = block(x, self.rope_cos, self.rope_sin)
        return self.lm_head(self.norm(x))


def count_params(model):
    """(total, non-embedding) in the PaLM sense; shared (tied) parameters counted once."""
    total = sum(p.numel() for p in model.parameters())  # parameters() de-duplicates tied weights
    embed = model.embed_tokens.weight.numel()
    non_embedding = total if model.m["tie_word_embeddings"] else total - embed
    return total, non_embedding


def flops_per_token(m, non_embedding, seq_len):
    # PaLM appendix B: 6N + 12 L H Q T, attention in full, no recompute.
    return 6 * non_embedding + 12 * m["num_hidden_layers"] * m["num_attention_heads"] * m["head_dim"] * seq_len


def learning_rate(o, step):
    """llmplan's schedule (executor/optimizer/adamw.cc LearningRateAt)."""
    lr, warm, decay = o["lr"], int(o["warmup_steps"]), int(o["decay_steps"])
    if warm > 0 and step < warm:
        return lr * (step + 1) / warm
    min_lr = lr * o["min_lr_ratio"]
    if step >= decay:
        return min_lr
    progress = min(max((step - warm) / max(1, decay - warm), 0.0), 1.0)
    return min_lr + 0.5 * (lr - min_lr) * (1.0 + math.cos(math.pi * progress))


# ----------------------------------------------------------------------------------------------
# llmplan's data stream (executor/data/batch_loader.h), so both stacks read the same tokens.

MASK64 = (1 << 64) - 1


def splitmix64(x):
    x = (x + 0x9E3779B97F4A7C15) & MASK64
    x = ((x ^ (x >> 30)) * 0xBF58476D1CE4E5B9) & MASK64
    x = ((x ^ (x >> 27)) * 0x94D049BB133111EB) & MASK64
    return x ^ (x >> 31)


class SampleOrder:
    """Global sample s -> window of seq_len + 1 tokens: a seeded Feistel permutation per epoch
    with cycle-walking, exactly as llmplan's SampleOrder::Window."""

    def __init__(self, num_tokens, seq_len, seed, shuffle=True):
        self.seq_len, self.seed, self.shuffle = seq_len, seed, shuffle
        self.windows = (num_tokens - 1) // seq_len
        if self.windows < 1:
            raise SystemExit(f"fsdp2_reference: the token file holds {num_tokens} tokens, fewer than seq_len + 1")
        self.half_bits = 1
        while self.half_bits < 31 and (1 << (2 * self.half_bits)) < self.windows:
            self.half_bits += 1

    def window(self, sample):
        epoch, index = divmod(sample, self.windows)
        if not self.shuffle:
            return index
        key = splitmix64(self.seed ^ splitmix64(epoch + 1))
        mask = (1 << self.half_bits) - 1
        x = index
        while True:
            left, right = x >> self.half_bits, x & mask
            for rnd in range(4):
                f = splitmix64(right ^ splitmix64((key + rnd) & MASK64)) & mask
                left, right = right, left ^ f
            x = (left << self.half_bits) | right
            if x < self.windows:
                return x


def open_tokens(path):
    """numpy view of a token file: llm.c .bin (256 x int32 header; magic 20240520 -> uint16,
    20240801 -> uint32) or raw uint16 (uint32 for *.u32), as llmplan reads them."""
    import numpy as np
    header = np.fromfile(path, dtype=np.int32, count=256)
    if len(header) == 256 and header[0] in (20240520, 20240801):
        dtype = np.uint16 if header[0] == 20240520 else np.uint32
        return np.memmap(path, dtype=dtype, mode="r", offset=256 * 4, shape=(int(header[2]),))
    return np.memmap(path, dtype=np.uint32 if path.endswith(".u32") else np.uint16, mode="r")


class TokenStream:
    """Rank `rank`'s micro-batches of llmplan's global sample stream."""

    def __init__(self, path, seq_len, micro_batch, seed, rank, world, vocab):
        self.tokens = open_tokens(path)
        self.order = SampleOrder(len(self.tokens), seq_len, seed)
        self.seq_len, self.micro_batch, self.rank, self.world = seq_len, micro_batch, rank, world
        self.next_sample = 0
        if int(self.tokens.max()) >= vocab:
            raise SystemExit(f"fsdp2_reference: {path} holds token ids >= the model's vocab {vocab}")

    def next(self, device):
        import numpy as np
        first = self.next_sample + self.rank * self.micro_batch
        rows = [self.tokens[w * self.seq_len: w * self.seq_len + self.seq_len + 1]
                for w in (self.order.window(first + j) for j in range(self.micro_batch))]
        self.next_sample += self.world * self.micro_batch
        return torch.from_numpy(np.stack(rows).astype(np.int64)).to(device, non_blocking=True)


# ----------------------------------------------------------------------------------------------
# The initial weights, for llmplan run --init-from.

def hf_name(name):
    """This script's parameter names -> LlamaForCausalLM's (what llmplan reads and exports)."""
    for wrapper in ("_checkpoint_wrapped_module.", "_orig_mod."):
        name = name.replace(wrapper, "")
    parts = name.split(".")
    if parts[0] == "layers":
        sub = "self_attn" if parts[2] in ("q_proj", "k_proj", "v_proj", "o_proj") else \
              "mlp" if parts[2] in ("gate_proj", "up_proj", "down_proj") else None
        return ".".join(["model", "layers", parts[1]] + ([sub] if sub else []) + parts[2:])
    return name if name.startswith("lm_head") else "model." + name


def write_initial_weights(model, m, out_dir, rank):
    """model.safetensors (fp32, every rank's shards gathered) + config.json, on rank 0."""
    from torch.distributed.checkpoint.state_dict import StateDictOptions, get_model_state_dict
    state = get_model_state_dict(model, options=StateDictOptions(full_state_dict=True, cpu_offload=True))
    if rank != 0:
        return
    from safetensors.torch import save_file
    tensors = {}
    for name, t in state.items():
        if m["tie_word_embeddings"] and name.startswith("lm_head"):
            continue
        tensors[hf_name(name)] = t.detach().float().contiguous()
    os.makedirs(out_dir, exist_ok=True)
    save_file(tensors, os.path.join(out_dir, "model.safetensors"), metadata={"format": "pt"})
    config = {"architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_size": m["hidden_size"],
              "intermediate_size": m["intermediate_size"], "num_attention_heads": m["num_attention_heads"],
              "num_key_value_heads": m["num_key_value_heads"], "head_dim": m["head_dim"],
              "num_hidden_layers": m["num_hidden_layers"], "vocab_size": m["vocab_size"],
              "rope_theta": m["rope_theta"], "rms_norm_eps": m["rms_norm_eps"],
              "tie_word_embeddings": bool(m["tie_word_embeddings"]), "attention_bias": bool(m["attention_bias"]),
              "max_position_embeddings": int(m.get("max_position_embeddings", 131072)), "torch_dtype": "float32"}
    with open(os.path.join(out_dir, "config.json"), "w") as f:
        json.dump(config, f, indent=1)


# ----------------------------------------------------------------------------------------------
# Distributed setup.

def free_port():
    with socket.socket() as s:
        s.bind(("", 0))
        return s.getsockname()[1]


def init_distributed(device_kind):
    if "RANK" not in os.environ:  # run directly: a world of one
        os.environ.update(RANK="0", LOCAL_RANK="0", WORLD_SIZE="1", LOCAL_WORLD_SIZE="1")
        os.environ.setdefault("MASTER_ADDR", "127.0.0.1")
        os.environ.setdefault("MASTER_PORT", str(free_port()))
    local_rank = int(os.environ.get("LOCAL_RANK", "0"))
    if device_kind == "cuda":
        device = torch.device("cuda", local_rank)
        torch.cuda.set_device(device)
        dist.init_process_group("nccl", device_id=device)
    else:
        device = torch.device("cpu")
        dist.init_process_group("gloo")
    return device, dist.get_rank(), dist.get_world_size()


def fsdp_api():
    try:
        from torch.distributed.fsdp import CPUOffloadPolicy, MixedPrecisionPolicy, fully_shard
    except Exception:  # before 2.6 it lived here
        try:
            from torch.distributed._composable.fsdp import CPUOffloadPolicy, MixedPrecisionPolicy, fully_shard
        except Exception as e:
            raise SystemExit(f"fsdp2_reference: needs PyTorch >= 2.4 (FSDP2 fully_shard); torch "
                             f"{torch.__version__} has none ({type(e).__name__}: {e})")
    return fully_shard, MixedPrecisionPolicy, CPUOffloadPolicy


def make_mesh(cfg, device, world):
    """1-D mesh for full_shard / shard_grad_op; (replicate, shard) for hybrid_shard and no_shard,
    which FSDP2 runs as HSDP (no_shard = shard groups of one)."""
    from torch.distributed.device_mesh import init_device_mesh
    strategy = cfg["strategy"]
    if strategy in ("full_shard", "shard_grad_op"):
        return init_device_mesh(device.type, (world,))
    shard = 1 if strategy == "no_shard" else (cfg["shard_group_size"] or world)
    if world % shard != 0:
        raise SystemExit(f"fsdp2_reference: world size {world} is not divisible by shard_group_size {shard}")
    return init_device_mesh(device.type, (world // shard, shard), mesh_dim_names=("replicate", "shard"))


def build(cfg, args, device, world):
    fully_shard, MixedPrecisionPolicy, CPUOffloadPolicy = fsdp_api()
    m = cfg["model"]
    with torch.device("meta"):
        model = Decoder(m)
    total, non_embedding = count_params(model)
    blocks = list(model.layers)
    for i, block in enumerate(blocks):
        if i in cfg["checkpoint_layers"]:
            from torch.distributed.algorithms._checkpoint.checkpoint_wrapper import checkpoint_wrapper
            block = checkpoint_wrapper(block, preserve_rng_state=False)
        if args.compile:
            block = torch.compile(block)
        model.layers[i] = block
    dtype = torch.bfloat16 if args.dtype == "bf16" else torch.float32
    kwargs = {"mesh": make_mesh(cfg, device, world),
              "mp_policy": MixedPrecisionPolicy(param_dtype=dtype, reduce_dtype=torch.float32)}
    # shard_grad_op keeps the gathered parameters from forward to backward.
    reshard = cfg["strategy"] != "shard_grad_op"
    offload = cfg["offload"] != "none"
    if offload:
        # FSDP2 has one kind of offload: parameters, gradients and optimizer state all on the
        # host, the optimizer stepping on the CPU. llmplan's "optimizer" offload keeps less there.
        kwargs["offload_policy"] = CPUOffloadPolicy()
    for i, block in enumerate(model.layers):
        # As torchtitan: the last block stays gathered after forward, since backward starts with it.
        fully_shard(block, reshard_after_forward=reshard and i < len(model.layers) - 1, **kwargs)
    # The root left to FSDP's default: it keeps embedding and head gathered after forward
    # (backward starts with the head); passing True explicitly would reshard them.
    fully_shard(model, **kwargs)
    model.to_empty(device="cpu" if offload else device)
    model.init_weights()
    model.init_rope(cfg["seq_len"], device)
    o = cfg["optimizer"]
    fused = device.type == "cuda" and not offload
    optimizer = torch.optim.AdamW(model.parameters(), lr=learning_rate(o, 0), betas=(o["beta1"], o["beta2"]),
                                  eps=o["eps"], weight_decay=o["weight_decay"], fused=fused)
    return model, optimizer, total, non_embedding


# ----------------------------------------------------------------------------------------------

def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--plan", help="llmplan plan file (llmplan estimate -o plan.json)")
    p.add_argument("--steps", type=int, default=13, help="optimizer steps in all, warm-up included")
    p.add_argument("--warmup", type=int, default=3, help="untimed steps first")
    p.add_argument("--compile", action="store_true", help="torch.compile each block")
    p.add_argument("--cpu-offload", action="store_true", help="FSDP2 CPUOffloadPolicy (overrides the plan)")
    p.add_argument("--device", choices=["cuda", "cpu"], default="cuda")
    p.add_argument("--dtype", choices=["bf16", "fp32"], default="bf16", help="compute (param) dtype")
    p.add_argument("--peak-flops", type=float, default=H100_BF16_PEAK, help="per GPU, for MFU")
    p.add_argument("--out", help="also write the JSON line to this file")
    p.add_argument("--data", help="token file: train on llmplan's sample stream of it instead of random tokens")
    p.add_argument("--init-out", help="write the initial weights here (HF directory) for llmplan run --init-from")
    p.add_argument("--kernel-trace", type=int, default=0, help="export a torch.profiler trace of this step (from 1)")
    p.add_argument("--kernel-trace-out", default="fsdp2_kernel_trace.json", help="where --kernel-trace writes")
    p.add_argument("--gqa", choices=["repeat", "sdpa"], default="repeat",
                   help="GQA: repeat K/V heads (torchtitan) or SDPA's enable_gqa")
    p.add_argument("--rms-norm", choices=["fused", "hf"], default="fused",
                   help="RMSNorm: F.rms_norm (fused) or HF LlamaRMSNorm's statements (hf)")
    g = p.add_argument_group("overrides of the plan (or the whole spec, without --plan)")
    g.add_argument("--seq-len", type=int)
    g.add_argument("--micro-batch", type=int)
    g.add_argument("--grad-accum", type=int)
    g.add_argument("--checkpoint", help="blocks to checkpoint: none, all, or e.g. 0,3-5")
    g.add_argument("--seed", type=int)
    g.add_argument("--hidden", type=int)
    g.add_argument("--intermediate", type=int)
    g.add_argument("--heads", type=int)
    g.add_argument("--kv-heads", type=int)
    g.add_argument("--head-dim", type=int)
    g.add_argument("--layers", type=int)
    g.add_argument("--vocab", type=int)
    g.add_argument("--rope-theta", type=float)
    g.add_argument("--tied", choices=["yes", "no"])
    args = p.parse_args(argv)
    if args.steps <= args.warmup:
        raise SystemExit("fsdp2_reference: --steps must exceed --warmup (nothing would be timed)")

    global GQA_MODE, RMS_NORM_MODE
    GQA_MODE = args.gqa
    RMS_NORM_MODE = args.rms_norm
    cfg = load_config(args)
    device, rank, world = init_distributed(args.device)
    if rank == 0 and cfg["gpus"] and cfg["gpus"] != world:
        print(f"fsdp2_reference: warning: the plan is for {cfg['gpus']} GPUs, running on {world}", file=sys.stderr)
    torch.manual_seed(cfg["seed"])
    model, optimizer, total, non_embedding = build(cfg, args, device, world)
    m = cfg["model"]
    if "params" in m and int(m["params"]) != total and rank == 0:
        print(f"fsdp2_reference: warning: model has {total} parameters, the plan says {m['params']}",
              file=sys.stderr)

    mb, accum, seq = cfg["micro_batch"], cfg["grad_accum"], cfg["seq_len"]
    gen = torch.Generator(device=device).manual_seed(cfg["seed"] * 1000 + rank)
    stream = TokenStream(args.data, seq, mb, cfg["seed"], rank, world, m["vocab_size"]) if args.data else None
    if args.init_out:
        write_initial_weights(model, m, args.init_out, rank)
    clip = float(cfg["optimizer"].get("grad_clip", 0) or 0)
    use_cuda = device.type == "cuda"

    def sync():
        if use_cuda:
            torch.cuda.synchronize(device)

    losses, step_times = [], []
    for step in range(args.steps):
        for group in optimizer.param_groups:
            group["lr"] = learning_rate(cfg["optimizer"], step)
        profiler = None
        if args.kernel_trace == step + 1:
            from torch.profiler import ProfilerActivity, profile
            profiler = profile(activities=[ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if use_cuda else []))
            profiler.__enter__()
        sync()
        start = time.perf_counter()
        loss_sum = torch.zeros((), device=device)
        for _ in range(accum):
            if stream is not None:
                tokens = stream.next(device)
            else:
                tokens = torch.randint(0, m["vocab_size"], (mb, seq + 1), device=device, generator=gen)
            logits = model(tokens[:, :-1])
            loss = F.cross_entropy(logits.flatten(0, 1).float(), tokens[:, 1:].flatten())
            (loss / accum).backward()
            loss_sum += loss.detach() / accum
        if clip > 0:
            torch.nn.utils.clip_grad_norm_(model.parameters(), clip)
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        sync()
        elapsed = time.perf_counter() - start
        losses.append(loss_sum)
        if profiler is not None:  # the profiler's host cost: this step is not timed
            profiler.__exit__(None, None, None)
            if rank == 0:
                profiler.export_chrome_trace(args.kernel_trace_out)
        elif step >= args.warmup:
            step_times.append(elapsed)

    # Losses averaged over ranks; memory the worst rank's.
    loss_t = torch.stack(losses).float()
    dist.all_reduce(loss_t)
    loss_t /= world
    if use_cuda:
        mem = torch.tensor([torch.cuda.max_memory_allocated(device), torch.cuda.max_memory_reserved(device)],
                           dtype=torch.float64, device=device)
        dist.all_reduce(mem, op=dist.ReduceOp.MAX)
        peak_alloc, peak_reserved = int(mem[0].item()), int(mem[1].item())
    else:
        peak_alloc = peak_reserved = 0
    step_s = sum(step_times) / len(step_times)
    tokens_per_s = mb * accum * seq / step_s
    fpt = flops_per_token(m, non_embedding, seq)
    result = {
        "tool": "pytorch-fsdp2",
        "mode": "compiled" if args.compile else "eager",
        "tokens_per_s_per_gpu": round(tokens_per_s, 1),
        "mfu": round(tokens_per_s * fpt / args.peak_flops, 4),
        "peak_allocated_bytes": peak_alloc,
        "peak_reserved_bytes": peak_reserved,
        # The host side of CPU offload (pinned params/grads, AdamW state); ru_maxrss is in KiB.
        "peak_host_rss_bytes": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024,
        "step_s": round(step_s, 5),
        "losses": [round(float(x), 5) for x in loss_t.tolist()],
        "step_times_s": [round(t, 5) for t in step_times],
        "model": m.get("name", "custom"),
        "params": total,
        "non_embedding_params": non_embedding,
        "flops_per_token": fpt,
        "gpus": world,
        "device": torch.cuda.get_device_name(device) if use_cuda else "cpu",
        "seq_len": seq,
        "micro_batch": mb,
        "grad_accum": accum,
        "checkpoint_layers": len(cfg["checkpoint_layers"]),
        "strategy": cfg["strategy"],
        "offload": "fsdp2-cpu-offload" if cfg["offload"] != "none" else "none",
        "dtype": args.dtype,
        "gqa": args.gqa,
        "rms_norm": args.rms_norm if hasattr(F, "rms_norm") else "hf",
        "data": args.data or "random",
        "warmup_steps": args.warmup,
        "timed_steps": len(step_times),
        "torch": torch.__version__,
    }
    if rank == 0:
        line = json.dumps(result)
        print(line, flush=True)
        if args.out:
            with open(args.out, "w") as f:
                f.write(line + "\n")
    dist.barrier()
    dist.destroy_process_group()
    return result


if __name__ == "__main__":
    main()
