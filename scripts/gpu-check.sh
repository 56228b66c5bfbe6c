#!/usr/bin/env bash
# Runs on the GPU machine (device tool): installs carried wheels (bash scripts/gpu-wheels.sh fetches
# them here into .whl; carry .whl), runs the GPU tests and the
# benchmarks, and writes logs under $OUT. Usage: bash scripts/gpu-check.sh [tests|bench|all|asymmetry|placement|optimize|verify|best-known|roundtrip|train|lanes] [ARGS...]
# tests [PYTEST ARGS]: the GPU tests; they take longer than one 10-minute call (H100, 2026-11-26),
# so run them in two calls: tests --shard 1/2, then tests --shard 2/2; or, on a machine of two
# GPUs or more, in one: lanes '0:tests --shard 1/2' '1:tests --shard 2/2'. The tests that need
# two GPUs run only where the lane has them: lanes '0,1:tests -k either_gpu'.
# best-known [ARGS]: benchmarks/best_known.py on .data/cuda-l1-h100.jsonl (carry .data, and runs/best-known
# to resume a run from an earlier machine); the run directory comes back as $OUT/best-known.tar.gz.
# bash scripts/gpu-unpack.sh FILES_AT puts what a call brought back (lanes' archives included) under runs/.
# On a machine of several GPUs, one shard a lane: lanes '0:best-known ... --shard 1/4' '1:best-known ... --shard 2/4' ...
# train learning-check STAGE... [ARGS]: benchmarks/learning_check.py --resume (its docstring has the plan of
# calls: prepare; each seed's policies at once in a lane; remeasure report --from the lanes), stopped at
# LEARNING_CHECK_S (540 s; in a lane, 60 s before the lane ends at the latest) with SIGINT so that the call
# returns with its state packed; the same call resumes. Its small state
# (arms, shown.db, samples, re-measurements) comes back as $OUT/learning-check.tar.gz: unpack it
# into runs/ and carry runs/learning-check on a fresh machine. A policy with its own --work runs/learning-check-PART
# ('0:train learning-check sft grpo --seeds N --from runs/learning-check --work ... & train learning-check sft
# control ...': steps joined by ' & ' run at once) comes back as learning-check-PART.tar.gz.
# train [bench|stages]: the other training checks of issue 11.
set -uo pipefail
OUT=${OUT:-/tmp/cudal1-out}
mkdir -p "$OUT"
export PYTHONUNBUFFERED=1 HF_HUB_OFFLINE=1
if [[ -n ${GPU_CHECK_LANE:-} ]]; then
  :  # a lane of `lanes`: the parent installed the wheels and set PYTHONPATH
elif ls .whl/*.whl >/dev/null 2>&1; then
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl || exit 1
  export PYTHONPATH=/tmp/site:$PWD/src PATH=/tmp/site/bin:$PATH  # bin: a carried py-spy
else
  export PYTHONPATH=$PWD/src
fi
nvidia-smi --query-gpu=index,uuid,name,driver_version,clocks.sm,clocks.mem --format=csv | tee "$OUT/gpu.txt"
python3 -c "import torch; print('torch', torch.__version__, 'cuda', torch.version.cuda)" | tee -a "$OUT/gpu.txt"
what=${1:-all}; shift || true
rc=0
# within S: S seconds, or fewer inside a lane, so that a step that stops itself (and then packs
# what it made) does so before the lane's own SIGINT, which would stop the packing too.
within() {
  local s=$1
  if [[ -n ${LANE_DEADLINE:-} ]]; then
    local left=$((LANE_DEADLINE - $(date +%s) - 60))
    ((left < s)) && s=$((left > 30 ? left : 30))
  fi
  echo "$s"
}
# option FLAG ARGS...: the value ARGS give FLAG (FLAG V or FLAG=V; the last one), empty if none:
# the modes below name their logs and archives after --part, --out, --json-out, --shard, --work.
option() {
  local flag=$1 value= prev=
  shift
  for arg in "$@"; do
    [[ $prev == "$flag" ]] && value=$arg
    [[ $arg == "$flag"=* ]] && value=${arg#"$flag"=}
    prev=$arg
  done
  echo "$value"
}
if [[ $what == lanes ]]; then
  # lanes 'GPUS:MODE ARGS[ + MODE ARGS...]' ...: several of this script's modes at once, each on its own GPUs
  # (CUDA_VISIBLE_DEVICES=GPUS, so each sees them as cuda:0...) and its own physical cores (the
  # GPUs' shares of the machine, split as the pool splits them), with its logs under
  # $OUT/lane-K. A machine of several GPUs costs the device budget what one of one GPU does, so
  # independent work (a benchmark, a verify, the tests) shares one call. Every lane is stopped
  # with SIGINT at LANE_S (540 s) and comes back as one archive, $OUT/lane-K.tar.gz (the device
  # tool returns at most 8 files). Other lanes' builds run beside a lane's timing: a lane's
  # numbers are those of a loaded machine.
  ngpu=$(nvidia-smi -L | wc -l); k=0; pids=()
  # The host's memory and the GPUs' use every 30 s (monitor.txt, in host.tar.gz): an H200 host's memory grows as it is used
  # (KINDS.md), and lanes that stall together point at the host. A lane whose log has not grown
  # for LANE_STALL_S (120 s) gets the processes' states and, where py-spy was carried (.whl),
  # the Python stacks of its busiest processes, once per stall: on four H200s three lanes stalled
  # within one minute and left nothing to tell why (2026-11-28).
  (while sleep 30; do date +%T; grep -E 'MemTotal|MemAvailable' /proc/meminfo | tr -s ' ' | tr '\n' ' '; echo
     nvidia-smi --query-gpu=index,utilization.gpu,memory.used --format=csv,noheader | tr '\n' ' '; echo
     uptime
     for log in "$OUT"/lane-*/lane.log; do
       [[ -f $log ]] || continue
       idle=$(( $(date +%s) - $(stat -c %Y "$log") ))
       if (( idle < ${LANE_STALL_S:-120} )); then rm -f "$log.stalled"; continue; fi
       [[ -f $log.stalled ]] && continue
       touch "$log.stalled"
       echo "stall: ${log%/lane.log} silent for ${idle} s"
       ps -eo pid,ppid,stat,etime,pcpu,rss,args --sort=-pcpu | cut -c1-160 | head -30
       if command -v py-spy >/dev/null; then
         for pid in $(pgrep -f 'cudal1|pytest|benchmarks/' | head -8); do
           timeout 20 py-spy dump --pid "$pid" 2>&1 | head -"${LANE_STACK_LINES:-200}"
         done
       fi
     done
   done >"$OUT/monitor.txt" 2>&1) &
  monitor=$!
  # Every second, each GPU's clocks, power, temperature and throttling (dmon) and which
  # processes use its SMs (pmon); who those processes are every 30 s. On four H200s a level-3
  # reference read 2.2x and 3.3x its own time on plateaus lasting seconds inside one loaded run
  # (18.9, 41.6, 62.2 ms; the candidate beside it the same), as lower SM clocks or other
  # contexts sharing the GPU would make it, and nothing logged which (2026-11-28).
  # Dated lines (-o DT), so that a result's timed window (environment.timed_window) finds its
  # seconds: python benchmarks/gpu_sharing.py RESULTS --host host.tar.gz --gpus gpu.txt.
  nvidia-smi dmon -s pucv -d 1 -o DT >"$OUT/dmon.txt" 2>&1 &
  loggers=($!)
  nvidia-smi pmon -s u -d 1 -o DT >"$OUT/pmon.txt" 2>&1 &
  loggers+=($!)
  (while true; do date +%T; ps -eo pid,ppid,pgid,stat,args | grep -E '[c]udal1|[p]ytest|[b]enchmarks/' | cut -c1-200; sleep 30 & wait $!; done \
     >"$OUT/processes.txt" 2>&1) &
  loggers+=($!)
  for spec in "$@"; do
    gpus=${spec%%:*}; cmd=${spec#*:}
    cpus=$(python3 -c "import sys; from cudal1.eval.devices import cpu_share
print(','.join(str(c) for g in sys.argv[2].split(',') for c in sorted(cpu_share(int(g), int(sys.argv[1])))))" "$ngpu" "$gpus")
    mkdir -p "$OUT/lane-$k"
    echo "lane $k: GPUs $gpus, CPUs $cpus: $cmd" | tee "$OUT/lane-$k/lane.txt"
    # 'MODE ARGS + MODE ARGS': modes one after the other in the lane, inside its one time limit;
    # 'MODE ARGS & MODE ARGS': modes at once on the lane's GPUs (GRPO runs that time nothing:
    # the learning check's policies with --strays fail), the step done when all are. The lane is
    # cut at every '+' and at every ' & ' (spaces both sides: 2>&1 and && stay whole) before the
    # shell reads it, so neither may appear inside quotes; then ARGS are read as the shell reads
    # them: '0:tests -k "a or b"'. A blank part is skipped: with no MODE this script runs all.
    # shellcheck disable=SC2086
    (export GPU_CHECK_LANE=1 OUT="$OUT/lane-$k" CUDA_VISIBLE_DEVICES=$gpus LANE_DEADLINE=$(($(date +%s) + ${LANE_S:-540}))
     timeout -s INT -k 30 "${LANE_S:-540}" taskset -c "$cpus" bash -c \
       'IFS=+ read -ra steps <<<"$1"
        for s in "${steps[@]}"; do
          together=(); while [[ $s == *" & "* ]]; do together+=("${s%% & *}"); s=${s#* & }; done; together+=("$s")
          running=()
          for t in "${together[@]}"; do
            [[ -z ${t//[[:space:]]/} ]] && continue
            # each in a subshell of its own: SIGINT, which stops the lane, still reaches it
            (eval "bash \"\$0\" $t"; echo "exit $? of: $t" >>"$OUT/lane.txt") & running+=($!)
          done
          ((${#running[@]})) && wait "${running[@]}"
        done' \
       "$0" "$cmd" >"$OUT/lane.log" 2>&1) &
    pids+=($!); k=$((k + 1))
  done
  wait "${pids[@]}"
  kill "$monitor" "${loggers[@]}" 2>/dev/null
  # One archive (the device tool brings back at most 8 files: gpu.txt, this and one a lane).
  sleep 1; tar -czf "$OUT/host.tar.gz" -C "$OUT" monitor.txt dmon.txt pmon.txt processes.txt 2>/dev/null
  rm -f "$OUT/monitor.txt" "$OUT/dmon.txt" "$OUT/pmon.txt" "$OUT/processes.txt"
  for ((i = 0; i < k; i++)); do
    echo "=== lane $i: $(tr '\n' ' ' <"$OUT/lane-$i/lane.txt")"
    grep -v '^\[' "$OUT/lane-$i/lane.log" | tail -n "${LANE_TAIL:-16}" | cut -c1-150
    tar -czf "$OUT/lane-$i.tar.gz" -C "$OUT" "lane-$i" && rm -rf "${OUT:?}/lane-$i"
  done
  exit 0
fi
if [[ $what == tests || $what == all ]]; then
  # No GPU test lives in tests/train or the learning check's tests; their modules import the
  # training extras (datasets, trl), which travel only when carried: without them, collecting
  # them would stop the whole run.
  skip=(); python3 -c "import datasets, trl" 2>/dev/null \
    || skip=(--ignore=tests/train --ignore=tests/benchmarks/test_learning_check.py)
  python3 -m pytest -m gpu -v -rfE --durations=15 -p no:cacheprovider "${skip[@]}" tests "$@" 2>&1 | tee "$OUT/pytest-gpu.log"
  rc=${PIPESTATUS[0]}
fi
if [[ $what == bench || $what == all ]]; then
  # One log per part, so that several bench calls in one command keep theirs.
  part=$(option --part "$@"); part=${part:-all}
  python3 benchmarks/evaluator.py "$@" 2>&1 | tee "$OUT/bench-evaluator-$part.log"
  [[ ${PIPESTATUS[0]} == 0 ]] || rc=1
fi
# fresh NAME: NAME, or NAME-2, NAME-3... where $OUT has NAME.log, so that a mode run twice in a
# lane ('placement ... + placement ... --env K=V') keeps both logs.
fresh() {
  local name=$1 i=1
  while [[ -e $OUT/$name.log ]]; do i=$((i + 1)); name=$1-$i; done
  echo "$name"
}
if [[ $what == asymmetry ]]; then
  # asymmetry [ARGS]: benchmarks/pair_asymmetry.py (issue 22: which kind of worker times slower).
  COLUMNS=${COLUMNS:-160} python3 benchmarks/pair_asymmetry.py "$@" 2>&1 | tee "$OUT/$(fresh asymmetry).log"
  rc=${PIPESTATUS[0]}
fi
if [[ $what == placement ]]; then
  # placement [ARGS]: benchmarks/placement.py (issue 22: is the per-process bias where memory lies?).
  # Each measured process's stderr is kept (cuDNN's own log, with --env CUDNN_LOGLEVEL_DBG=3 CUDNN_LOGDEST_DBG=stderr).
  name=$(fresh placement)
  COLUMNS=${COLUMNS:-120} python3 benchmarks/placement.py --json "$OUT/$name.json" --logs "$OUT/$name-logs" "$@" 2>&1 \
    | tee "$OUT/$name.log"
  rc=${PIPESTATUS[0]}
fi
if [[ $what == optimize ]]; then
  # optimize ARGS --out runs/NAME: the run directory comes back as $OUT/optimize-NAME.tar.gz
  # (gpu-unpack.sh puts it in runs/; carry it and add --resume to go on from another machine).
  run=$(option --out "$@")
  # Stopped with SIGINT (optimize keeps what it stored) a minute before the lane ends, so it still packs.
  COLUMNS=${COLUMNS:-160} timeout -s INT -k 45 "$(within "${OPTIMIZE_S:-540}")" python3 -m cudal1.cli optimize "$@" \
    2>&1 | tee "$OUT/optimize.log"
  rc=${PIPESTATUS[0]}
  [[ -n $run && -d $run ]] && tar -czf "$OUT/optimize-$(basename "$run").tar.gz" -C "$(dirname "$run")" "$(basename "$run")"
fi
if [[ $what == verify ]]; then
  # verify RECORDS [ARGS]: the report JSON (and its .rows.jsonl) go to $OUT unless --json-out is given.
  # With --json-out PATH (to --resume across machines: carry PATH's folder), PATH and its
  # .rows.jsonl are copied to $OUT as well. One part a lane: lanes '0:verify R --shard 1/4 --json-out
  # runs/verify/p1.json --resume --deadline-s 420' ...; `cudal1 verify --help` says how parts report as one.
  json=(--json-out "$OUT/verify.json"); given=$(option --json-out "$@")
  [[ -n $given ]] && json=()
  COLUMNS=${COLUMNS:-240} python3 -m cudal1.cli verify "$@" "${json[@]}" 2>&1 | tee "$OUT/$(fresh verify).log"
  rc=${PIPESTATUS[0]}
  [[ -n $given ]] && cp "$given" "${given%.json}.rows.jsonl" "$OUT/" 2>/dev/null
fi
if [[ $what == best-known ]]; then
  # Stop a little before the device tool's 10-minute limit so the run directory still comes back.
  # No evaluation starts after BEST_KNOWN_SESSION_S (3/5 of BEST_KNOWN_S), so that those under way
  # (a max-autotune build of a level-3 task takes up to 5 minutes) finish and are kept. SIGINT at
  # BEST_KNOWN_S (optimize stops and keeps what it stored; what is still in flight is lost);
  # SIGKILL 45 s later if evaluations in flight hold it up (the database stays consistent).
  # Candidates may hold 12 GB (BEST_KNOWN_MEM_GB), not the default share of 64 GB among 8 workers:
  # at 7 GB, every torch.compile mode and the CUDA graph of L3_31 failed for memory (H100).
  limit=$(within "${BEST_KNOWN_S:-450}")
  COLUMNS=${COLUMNS:-160} timeout -s INT -k 45 "$limit" python3 benchmarks/best_known.py \
    .data/cuda-l1-h100.jsonl --run runs/best-known --resume --json "$OUT/best-known.json" \
    --session-s "${BEST_KNOWN_SESSION_S:-$((limit * 3 / 5))}" --set "eval.sandbox.memory_limit_gb=${BEST_KNOWN_MEM_GB:-12}" "$@" \
    2>&1 | tee "$OUT/best-known.log"
  rc=${PIPESTATUS[0]}
  python3 benchmarks/best_known.py .data/cuda-l1-h100.jsonl --run runs/best-known --report-only \
    --json "$OUT/best-known.json" --markdown "$OUT/best-known.md" 2>&1 | tee "$OUT/best-known-table.log"
  # One archive: the device tool brings back only a few files per call, and a run directory
  # left out would lose the call's progress. Unpack it here into runs/ to resume. A lane's
  # --shard K/N archives its own part only (the other lanes' are being written beside it), as
  # best-known-shard-K-of-N.tar.gz.
  part=best-known; shard=$(option --shard "$@")
  [[ -n $shard ]] && part=best-known/shard-${shard/\//-of-}
  # Its own name a shard, so that two shards run one after the other in a lane keep both.
  tar -czf "$OUT/$(echo "$part" | tr / -).tar.gz" -C runs "$part"
fi
if [[ $what == roundtrip ]]; then
  # roundtrip [VERIFY ARGS]: optimize -> export -> verify on this GPU. The best-known run's kept
  # kernels (carry runs/best-known) are exported as records and re-measured by verify.
  # A benchmark run in shards (best-known --shard K/N) has a run directory per shard: their
  # exports go into one records file.
  records="$OUT/best-known-export.jsonl"; : >"$records"; : >"$OUT/roundtrip.log"; exported=0
  for run in runs/best-known/optimize runs/best-known/shard-*-of-*/optimize; do
    [[ -d $run ]] || continue
    python3 -m cudal1.cli export "$run" --out "$OUT/part.jsonl" 2>&1 | tee -a "$OUT/roundtrip.log"
    [[ ${PIPESTATUS[0]} == 0 ]] && cat "$OUT/part.jsonl" >>"$records" && exported=1
    rm -f "$OUT/part.jsonl"
  done
  if [[ $exported == 1 ]]; then
    COLUMNS=${COLUMNS:-200} python3 -m cudal1.cli verify "$records" --json-out "$OUT/roundtrip.json" "$@" \
      2>&1 | tee -a "$OUT/roundtrip.log"
    rc=${PIPESTATUS[0]}
  else
    rc=1
  fi
fi
if [[ $what == train ]]; then
  part=${1:-prepare}; shift || true
  case $part in
    learning-check)
      stages=(); while [[ $# -gt 0 && $1 != -* ]]; do stages+=("$1"); shift; done
      # --work DIR (default runs/learning-check): lanes that split the arms by --tasks, and policies
      # trained at once ('&'), each keep their own; the log is named after both.
      w=$(option --work "$@"); w=${w:-runs/learning-check}
      name=$(IFS=-; echo "${stages[*]:-all}")-$(basename "$w")
      COLUMNS=${COLUMNS:-200} timeout -s INT -k 45 "$(within "${LEARNING_CHECK_S:-540}")" python3 benchmarks/learning_check.py \
        --stage "${stages[@]:-all}" --resume "$@" 2>&1 | tee "$OUT/learning-check-$name.log"
      rc=${PIPESTATUS[0]}
      keep=$(mktemp -d)/$(basename "$w"); mkdir -p "$keep"
      cp "$w/learning-check.json" "$OUT/" 2>/dev/null
      cp "$w/learning-check.json" "$keep/" 2>/dev/null  # and in the archive: gpu-unpack.sh puts it in $w
      # A database is its file and its write-ahead log (-wal): the script has exited, so the two
      # copied together are whole. The file alone came back empty (2026-11-28: no arms table).
      for d in arms remeasure; do [[ -d $w/$d ]] && mkdir -p "$keep/$d" && cp "$w/$d"/*.db* "$w/$d"/*.log "$keep/$d/" 2>/dev/null; done
      cp "$w"/shown.db* "$keep/" 2>/dev/null
      for s in "$w"/seed-*; do
        [[ -d $s/samples ]] && mkdir -p "$keep/${s##*/}" && cp -r "$s/samples" "$keep/${s##*/}/"
        for k in grpo control ablation; do
          for f in steps strays; do cp "$s/$k/$f.jsonl" "$keep/${s##*/}/$k-$f.jsonl" 2>/dev/null; done
        done
      done
      # One archive: the device tool brings back at most 8 files, 2 folders down.
      tar -czf "$OUT/$(basename "$w").tar.gz" -C "${keep%/*}" "$(basename "$w")" ;;
    bench) python3 benchmarks/training.py "$@" 2>&1 | tee "$OUT/bench-training.log"; rc=${PIPESTATUS[0]} ;;
    stages) bash scripts/train-stages.sh "$OUT" 2>&1 | tee "$OUT/train-stages.log"; rc=${PIPESTATUS[0]} ;;
    *) echo "train: unknown part $part (learning-check|bench|stages)" >&2; rc=2 ;;
  esac
fi
exit $rc
