#!/usr/bin/env bash
# Run THERE (the GPU machine, .deps carried): issue #36's GPU acceptance, a
# fine-tuning run as a user would make one, in one device call (~6 min):
#   1. conversations (synthetic, deterministic: tools/device/make_chats.py),
#      rendered with Llama 3's real tokenizer by `data prepare --chat --split`
#   2. a Llama-3.2-1B-shaped model trained 2 steps and exported as a Hugging
#      Face directory: the "pretrained" weights
#   3. the fine-tune: --init-from that directory, the chat data under its loss
#      mask, --attention documents, --eval-every, --keep-best; and the same run
#      with --attention window, side by side
#   4. llmplan compare on each: predicted against measured step time
# Everything it prints, the results lines (fine_tune.results.jsonl, for
# docs/results/fine_tune.jsonl), the documents run's output and compare, and
# an archive of the rest with the runs' small files (fine_tune.tar.gz) land in $OUT.
set -uo pipefail
root="$(cd "$(dirname "$0")/../.." && pwd)"
cd "$root"
t0=$(date +%s)
el() { echo "$(($(date +%s) - t0)) s"; }
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
out="${OUT:-$root/build-gpu/fine_tune}"
mkdir -p "$out"
build="${LLMPLAN_GPU_BUILD_DIR:-$root/build-gpu}"
if ! LLMPLAN_GPU_TARGETS="${LLMPLAN_GPU_TARGETS:-llmplan llmplan-executor}" bash tools/device/gpu_build.sh \
    >"$out/build.log" 2>&1; then
  tail -n 30 "$out/build.log"
  echo "fine_tune: build failed" >&2
  exit 1
fi
echo "fine_tune: built at $(el)"
llmplan="$build/tools/llmplan"
work="${LLMPLAN_FINE_TUNE_DIR:-/tmp/llmplan_fine_tune}"
rm -rf "$work"
mkdir -p "$work"
tar -xJf tests/data/tokenizers/llama3.tar.xz -C "$work"
tokenizer="$(find "$work" -name tokenizer.json | head -n 1)"

seq="${LLMPLAN_FINE_TUNE_SEQ:-4096}"
mb="${LLMPLAN_FINE_TUNE_MB:-4}"
steps="${LLMPLAN_FINE_TUNE_STEPS:-40}"
python3 tools/device/make_chats.py "${LLMPLAN_FINE_TUNE_CHATS:-6000}" >"$work/chats.jsonl"
"$llmplan" data prepare --chat "$work/chats.jsonl" --tokenizer "$tokenizer" -o "$work/chat.bin" --split 0.05 \
  2>&1 | tee "$out/prepare.txt"
"$llmplan" data inspect "$work/chat.bin" 2>&1 | tee -a "$out/prepare.txt"
echo "fine_tune: data at $(el)"

# The profile: the measured one of this GPU where the project has it (H200),
# otherwise this GPU measured now (llmplan profile, ~1 min) on top of the
# datasheet one, so the prediction is of measured hardware either way.
profile="${LLMPLAN_FINE_TUNE_PROFILE:-}"
if [ -z "$profile" ]; then
  if nvidia-smi --query-gpu=name --format=csv,noheader | grep -q H200; then
    profile=h200-sxm-1gpu
  else
    name="$(nvidia-smi --query-gpu=name --format=csv,noheader | head -n 1 | tr 'A-Z ' 'a-z-' | sed 's/^nvidia-//')"
    profile="$work/$name-measured.json"
    timeout 240 "$llmplan" profile -o "$profile" --name "$name-measured-$(date -u +%F)" >"$out/profile.log" 2>&1 ||
      { tail -n 20 "$out/profile.log"; exit 1; }
  fi
fi
echo "fine_tune: profile $profile at $(el)"
plan_args="--model llama3.2-1b --gpus 1 --gpu $profile --seq $seq --micro-batch $mb --global-batch $mb \
  --checkpoint-layers none --offload none --lr 2e-5 --warmup-steps 5"
"$llmplan" estimate $plan_args -o "$work/window.plan.json" >"$out/estimate_window.txt" 2>&1
"$llmplan" estimate $plan_args --attention documents --data "$work/chat.bin" -o "$work/documents.plan.json" \
  2>&1 | tee "$out/estimate_documents.txt"
# The "pretrained" model: two steps, exported.
"$llmplan" run --no-learn --plan "$work/window.plan.json" --data "$work/chat.bin" --steps 2 --out "$work/pre" \
  --ckpt-dir "$work/pre-ckpt" --no-final-weights >"$out/pretrain.txt" 2>&1 || { tail "$out/pretrain.txt"; exit 1; }
"$llmplan" export --ckpt "$work/pre-ckpt/step-00000002" --out "$work/hf" 2>&1 | tail -n 2
rm -rf "$work/pre-ckpt"  # a 1B checkpoint with AdamW's state is ~20 GB: the disk holds three
echo "fine_tune: exported at $(el)"

status=0
for attention in documents window; do
  run="$work/ft-$attention"
  "$llmplan" run --no-learn --plan "$work/$attention.plan.json" --data "$work/chat.bin" --init-from "$work/hf" \
    --eval-data "$work/chat.eval.bin" --eval-every 20 --keep-best --ckpt-dir "$work/ckpt-$attention" \
    --steps "$steps" --no-final-weights --out "$run" 2>&1 | tee "$out/run_$attention.txt" | tail -n 25 || status=1
  "$llmplan" compare --run "$run" 2>&1 | tee "$out/compare_$attention.txt" | head -n 40
  rm -rf "$work/ckpt-$attention"
  echo "fine_tune: $attention run at $(el)"
done
python3 tools/device/results_lines.py fine_tune "$work" --llmplan "$llmplan" \
  --command "LLMPLAN_FINE_TUNE_STEPS=$steps LLMPLAN_FINE_TUNE_MB=$mb LLMPLAN_FINE_TUNE_SEQ=$seq tools/device/fine_tune.sh; llmplan compare --run RUN" >"$out/fine_tune.results.jsonl" || status=1
# A device call returns at most 8 files: the logs and the runs' small files
# go into one archive; the results lines and the documents run stay beside it.
# (Written in $work first: tar reading the folder it writes into fails.)
(cd "$out" && tar -czf "$work/fine_tune.tar.gz" --exclude=fine_tune.results.jsonl --exclude=run_documents.txt \
  --exclude=compare_documents.txt . -C "$work" ft-documents ft-window $(cd "$work" && ls ./*-measured.json 2>/dev/null) &&
  find . -maxdepth 1 -type f ! -name fine_tune.results.jsonl ! -name run_documents.txt ! -name compare_documents.txt \
    -delete && mv "$work/fine_tune.tar.gz" .) || status=1
exit $status
