#!/usr/bin/env bash
# Prepare a same-node A/B on the GPU machine: the working tree ("tree") against the files as they are at REF
# ("base"), for the gpu_node.sh step `ab`. Writes .ab/base/<file> for each FILE (git-ignored; carry it to the
# device with carry [".ab", ...]) and .ab/base.ref.
#   bash scripts/ab_base.sh HEAD flash_kernels/csrc/flash_decode.cu flash_kernels/_ops.py
#   then, on the device: AB_CMD="python3 scripts/flush_check.py --modes read" STEPS="build ab" bash scripts/gpu_node.sh
set -euo pipefail
[ $# -ge 2 ] || { echo "usage: bash scripts/ab_base.sh REF FILE [FILE ...]  (the base side: FILEs as at REF)" >&2; exit 2; }
ref=$1; shift
cd "$(git rev-parse --show-toplevel)"
rm -rf .ab/base .ab/base.ref  # a failure below leaves no base for the step to mistake for this one
sha=$(git rev-parse --short "$ref^{commit}" 2>/dev/null) || { echo "ab_base: $ref is not a commit here" >&2; exit 2; }
mkdir -p .ab/base
for f in "$@"; do
  git cat-file -e "$sha:$f" 2>/dev/null || { echo "ab_base: $f does not exist at $ref ($sha)" >&2; exit 2; }
  mkdir -p ".ab/base/$(dirname "$f")" && git show "$sha:$f" > ".ab/base/$f"
done
echo "$sha $*" > .ab/base.ref
echo "base = $* as at $sha; tree = the working tree ($(git diff --stat "$sha" -- "$@" | tail -1))"
