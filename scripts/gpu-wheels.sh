#!/usr/bin/env bash
# Downloads, on this machine, the wheels the GPU machine's image lacks into .whl/ (ignored by git),
# which a device call carries and scripts/gpu-check.sh installs. The image has torch, triton,
# transformers, accelerate, peft, typer, rich, pyyaml and pytest, but not pydantic (cudal1's
# configs), nor TRL and datasets (the training stages), nor py-spy (the lanes' stall stacks).
# Versions are CI's (.ci/constraints.txt), for the image's Python 3.12 on x86-64.
#
#   bash scripts/gpu-wheels.sh           # pydantic and what it needs, and py-spy (about 6 MB)
#   bash scripts/gpu-wheels.sh --train   # and trl, datasets, dill, multiprocess: the training
#                                        # extras the image's package list lacks (not yet tried there)
set -euo pipefail
cd "$(dirname "$0")/.."
names=(pydantic pydantic_core annotated-types typing-inspection)
[[ ${1:-} == --train ]] && names+=(trl datasets dill multiprocess)
mkdir -p .whl
pins=()
for name in "${names[@]}"; do
  # constraints.txt spells some names with '_' and some with '-': match either.
  pattern=$(sed 's/[-_]/[-_]/g' <<<"$name")
  pin=$(grep -iE "^${pattern}==" .ci/constraints.txt) || { echo "no pin for $name in .ci/constraints.txt" >&2; exit 2; }
  pins+=("$pin")
done
platforms=()
for p in manylinux_2_28_x86_64 manylinux_2_27_x86_64 manylinux_2_17_x86_64 manylinux2014_x86_64 \
  manylinux_2_5_x86_64 manylinux1_x86_64; do
  platforms+=(--platform "$p")
done
python3 -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
  "${platforms[@]}" -d .whl "${pins[@]}" py-spy==0.4.3
ls -la .whl
