#!/bin/bash
# The GPU suite on one machine in N pytest processes at once. First one process sets every
# test up without running it (--compile-only), so each file's precompile fixture compiles
# its kernels once, N nvcc at a time, into scangen's cubin cache; then N shards
# (--shard K/N) run from that cache (its files are written whole, by a rename, so
# processes can share it; SCANGEN_CACHE_DIR names it). A test that runs past
# $SHARD_TEST_TIMEOUT seconds (default 240) has every thread's Python stack written to its
# shard's log, so a hang says where it is.
#
#   SCANGEN_REQUIRE_GPU=1 SCANGEN_ALLOW_SKIP=numba,multi_gpu bash tests/gpu/run_sharded.sh [N] [...]
#
# (SCANGEN_ALLOW_SKIP: what this machine genuinely lacks may skip; anything else missing fails)
#
# N defaults to the number of CPU cores (at most 16). On a machine of several GPUs the
# shards take turns (shard K sees GPU K mod GPUs only). Logs: $SHARD_LOGS (default
# /tmp/scangen-shards)/shard_K.txt. Exits 1 if any shard failed.
set -u
cd "$(dirname "$0")/../.."
cores=$(nproc)
n=${1:-$(( cores < 16 ? cores : 16 ))}
[ $# -gt 0 ] && shift
logs=${SHARD_LOGS:-/tmp/scangen-shards}
cache=$logs/cache
mkdir -p "$logs" "$cache"
start=$(date +%s)
# scangen's cubin cache is shared; PyCUDA's own (its few elementwise kernels, written in
# place) is one per process
export SCANGEN_CACHE_DIR=$cache/scangen
XDG_CACHE_HOME=$cache/compile python3 -m pytest -q -p no:cacheprovider --compile-only tests/gpu "$@" \
    > "$logs/compile.txt" 2>&1
echo "compiled in $(( $(date +%s) - start )) s: $(tail -1 "$logs/compile.txt")"
gpus=$(nvidia-smi -L 2>/dev/null | grep -c '^GPU')
[ "$gpus" -ge 1 ] || gpus=1
pids=()
for k in $(seq 0 $((n - 1))); do
    # Each shard reports as it ends, so that a run cut short still says what finished.
    (
        # --durations: each log ends with its slowest tests, what a better split needs
        CUDA_VISIBLE_DEVICES=${CUDA_VISIBLE_DEVICES:-$((k % gpus))} \
        XDG_CACHE_HOME=$cache/shard$k python3 -m pytest -q -p no:cacheprovider --shard "$k/$n" \
            -o faulthandler_timeout="${SHARD_TEST_TIMEOUT:-240}" \
            --durations=12 --durations-min=2 tests/gpu "$@" > "$logs/shard_$k.txt" 2>&1
        shard_status=$?
        [ "$shard_status" -eq 5 ] && shard_status=0  # 5: its slice selected no test
        echo "shard $k after $(( $(date +%s) - start )) s: $(tail -1 "$logs/shard_$k.txt")"
        grep -h "^FAILED\|^ERROR" "$logs/shard_$k.txt"
        exit $shard_status
    ) &
    pids+=($!)
done
status=0
for pid in "${pids[@]}"; do
    wait "$pid" || status=1
done
echo "all shards done in $(( $(date +%s) - start )) s"
exit $status
