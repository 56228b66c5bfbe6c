#!/usr/bin/env bash
# Unpacks what a device call brought back (its files_at folder) into runs/, where the next call
# resumes from (carry the folders it names): the benchmark's run directory (best-known.tar.gz,
# or best-known-shard-K-of-N.tar.gz a shard), a verify's --json-out report and rows (into runs/verify), the
# run directory of optimize --out runs/NAME (optimize-NAME.tar.gz), the learning check's state (learning-check.tar.gz, or learning-check-PART.tar.gz a lane's own --work). Lanes' archives (lane-K.tar.gz) are opened
# first; what is already under runs/ is replaced by the newer copy.
#
#   bash scripts/gpu-unpack.sh /work/.device/3
set -euo pipefail
src=${1:?"usage: bash scripts/gpu-unpack.sh FILES_AT (where a device call put its files)"}
[[ -d $src ]] || { echo "$src: no such folder" >&2; exit 2; }
cd "$(dirname "$0")/.."
mkdir -p runs
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
for lane in "$src"/lane-*.tar.gz; do
  if [[ -f $lane ]]; then tar -xzf "$lane" -C "$tmp"; fi
done
found=0
for dir in "$src" "$tmp"/lane-*; do
  [[ -d $dir ]] || continue
  for bk in "$dir"/best-known*.tar.gz; do
    [[ -f $bk ]] || continue
    tar -xzf "$bk" -C runs
    echo "runs/$(tar -tzf "$bk" | head -n 1 | cut -d/ -f1-2) <- ${dir#"$tmp"/}"
    found=1
  done
  for run in "$dir"/optimize-*.tar.gz; do
    [[ -f $run ]] || continue
    tar -xzf "$run" -C runs
    echo "runs/$(tar -tzf "$run" | head -n 1 | cut -d/ -f1) <- ${dir#"$tmp"/}"
    found=1
  done
  for lc in "$dir"/learning-check*.tar.gz; do
    [[ -f $lc ]] || continue
    # Lanes share one runs/learning-check on the GPU machine, and each packs all of it: a lane that
    # packed earlier holds older copies of another lane's files, which must not replace newer ones.
    # A lane given its own --work runs/learning-check-PART packs that folder under its own name.
    tar -xzf "$lc" -C runs --keep-newer-files 2>&1 | grep -v 'is newer or same age' || true
    echo "runs/$(basename "$lc" .tar.gz) <- ${dir#"$tmp"/}"
    found=1
  done
  for rows in "$dir"/*.rows.jsonl; do
    [[ -f $rows ]] || continue
    mkdir -p runs/verify
    cp "$rows" runs/verify/
    report=${rows%.rows.jsonl}.json
    if [[ -f $report ]]; then cp "$report" runs/verify/; fi
    echo "runs/verify/${rows##*/} <- ${dir#"$tmp"/}"
    found=1
  done
done
if [[ $found == 0 ]]; then echo "nothing to unpack in $src" >&2; exit 1; fi
