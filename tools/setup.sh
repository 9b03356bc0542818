#!/usr/bin/env bash
# One command for a fresh machine: install what is missing, build, and run the
# main job — a plan for Llama-3-8B on 8 x H100 (built-in preset and profile).
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
"$root/tools/install_deps.sh"
"$root/tools/build.sh"
"$root/build/tools/llmplan" estimate --model llama3-8b --gpus 8 --gpu h100-sxm-80g --seq 8192 --global-batch 256
