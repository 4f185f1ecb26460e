#!/usr/bin/env bash
# The gpu-marked tests in parts, each sized to fit a device call of 10 minutes:
#
#   a  the softmax tests (tests/ops/softmax/)
#   b  the other Triton op tests (tests/ops/ but softmax, the custom ops and g's)
#   g  the decode step, decode attention and sampling tests (tests/ops/decode_step,
#      decode_attention, sampling): large vocabularies and a whole model block, apart from b
#   l  the ladders' tests (tests/ladders) but those that run Nsight Compute: nvcc-bound, they
#      check each step and judge a table's arithmetic, never a speed, so they take workers
#   p  the ladders' Nsight Compute tests (a profile's counters, alone on the GPU)
#   c  every other test file but d's, e's and f's (timer and ncu tests: it always runs alone)
#   d  tests/commands/test_bad_input.py and tests/ops/test_torch_ops.py: the bad-input matrix and the
#      custom ops; compile-bound, they time nothing, so they take GPU_SUITE_WORKERS
#   e  the KernelBench suite of tests/evaluate/test_eval_gpu.py
#   f  the GPU MODE suite of tests/evaluate/test_eval_gpu.py and its timing cheats
#   h  the rest of tests/evaluate/test_eval_gpu.py: a cheat of every class, the wall, the
#      problems that need more memory than a card or fit one input set. Their verdicts rest
#      on what a solution returns, never on a speed, so they take GPU_SUITE_WORKERS; the
#      one sized from the card's free memory is whole_card
#   t  the teaching kernels' tests, unmarked (they run on the CPU's interpreter in CI), here
#      on the GPU
#   Parts e, f and h judge a solution in worker processes of their own and time it, so each
#   test may take up to EVAL_TEST_TIMEOUT s (900 s, the suite subprocess's own limit) instead
#   of the 200 s of the others. Parts e and f assert on the times they measure: one process.
#
#   GPU_SUITE_WORKERS=12 bash benchmarks/gpu_suite.sh d a b t g l   # about 7 minutes on an H100
#   bash benchmarks/gpu_suite.sh c          # the lab's quick run on the GPU is most of it
#   bash benchmarks/gpu_suite.sh p e
#   GPU_SUITE_WORKERS=6 bash benchmarks/gpu_suite.sh f h            # one call each if need be
#
# Seconds a part takes on an H100 80GB HBM3 (pytest's own time; each pytest start adds 5-8 s),
# with GPU_SUITE_WORKERS=12 where it applies, to plan calls of 10 minutes by:
#   d 57   a 44   b 128   t 38   g 58   l 53 + its whole_card tests   h 50 + 166 (whole_card)
#   p 63   c 325 (the lab's quick run 146)   e 333 (the KernelBench suite 327)   f over 140
#
# Each part's log, with its 25 slowest tests, goes to $OUT (or the current folder) as
# gpu-suite-part-<p>.log; the exit status is the first failing part's. The tests run with
# autotuning off (KERNELAB_TRITON_AUTOTUNE=0: every candidate is still checked, none timed).
#
# Parts joined by commas (c,p) run one after the other as a group. GPU_SUITE_CARDS=N (default 1)
# on a machine of N GPUs runs the groups at once, group i on card i (CUDA_VISIBLE_DEVICES), so
# the parts that must be alone on a GPU (c, e, f, p: they time or profile) each get a card:
#   GPU_SUITE_CARDS=5 GPU_SUITE_WORKERS=12 bash benchmarks/gpu_suite.sh d,a,b,t,g,l,h c p,e f
# With one card (or GPU_SUITE_CARDS=1) the groups run one after another, as the parts do.
#
# GPU_SUITE_WORKERS=N (default 1) runs parts a, b, d, g, h, l and t in N pytest-xdist processes.
# Their time is mostly Triton compiling kernels or a judge starting, on one CPU core each, and
# none asserts a speed, so sharing the GPU cannot change a result; the kernels take turns on it.
# Tests marked whole_card (full sizes that hold many GiB) then run alone, in one process.
set -u -o pipefail

cd "$(dirname "$0")/.."
logs=${OUT:-.}
export PYTHONPATH=$PWD/src${PYTHONPATH:+:$PYTHONPATH}
export PATH=/usr/local/cuda/bin:$PATH
export KERNELAB_CACHE=${KERNELAB_CACHE:-$PWD/.kernelab-cache}
export KERNELAB_TRITON_AUTOTUNE=0
pytest=(python3 -m pytest -q -p no:cacheprovider --durations=25)
# a hung kernel (a cooperative wait that never ends) fails its test instead of the call
timeout_flag=()
if python3 -c "import pytest_timeout" 2>/dev/null; then timeout_flag=(--timeout); fi

# GPU_SUITE_COLLECT=1 lists each part's tests (pytest --collect-only) and runs none: how
# tests/benchmarks/test_gpu_suite_parts.py proves, without a GPU, that the parts together hold
# every gpu-marked test once.
if [ "${GPU_SUITE_COLLECT:-0}" = 1 ]; then
    pytest=(python3 -m pytest -q -p no:cacheprovider --collect-only)
    GPU_SUITE_WORKERS=1
fi

workers=${GPU_SUITE_WORKERS:-1}
parallel=()
if [ "$workers" -gt 1 ]; then
    if python3 -c "import xdist" 2>/dev/null; then
        parallel=(-n "$workers")
    else
        echo "gpu_suite.sh: GPU_SUITE_WORKERS=$workers but pytest-xdist is missing: one process" >&2
    fi
fi

# Runs pytest once, its log appended to the part's; exit status 5 (nothing collected) is no failure.
run_pytest() {
    local part=$1; shift
    echo "== part $part${GPU_SUITE_CARD:+ on card $GPU_SUITE_CARD}: $*" \
        | tee -a "$logs/gpu-suite-part-$part.log"
    # Part c's ladder tests write their records under $OUT; keep those out of the logs' folder.
    OUT=$(mktemp -d) "${pytest[@]}" "$@" 2>&1 | tee -a "$logs/gpu-suite-part-$part.log"
    local code=${PIPESTATUS[0]}
    if [ "$code" -eq 5 ]; then code=0; fi
    return "$code"
}

# Runs one part; returns its exit status.
run_part() {
    local part=$1
    # the parallel parts' -m and test paths; the serial parts' whole pytest arguments
    shared=()
    case $part in
        a) shared=(tests/ops/softmax) ;;
        b) shared=(tests/ops --ignore=tests/ops/softmax
                   --ignore=tests/ops/test_torch_ops.py --ignore=tests/ops/decode_step
                   --ignore=tests/ops/decode_attention --ignore=tests/ops/sampling) ;;
        g) shared=(tests/ops/decode_step tests/ops/decode_attention tests/ops/sampling) ;;
        l) shared=(-k "not (profile or ncu)" tests/ladders) ;;
        d) shared=(tests/commands/test_bad_input.py tests/ops/test_torch_ops.py) ;;
        p) args=(-m gpu -k "profile or ncu" tests/ladders) ;;
        c) args=(-m gpu --ignore=tests/ops --ignore=tests/ladders
                 --ignore=tests/commands/test_bad_input.py --ignore=tests/evaluate/test_eval_gpu.py
                 tests) ;;
        e) args=(-m gpu tests/evaluate/test_eval_gpu.py -k kernelbench) ;;
        f) args=(-m gpu tests/evaluate/test_eval_gpu.py
                 -k "not kernelbench and (gpumode or stream or patched or after_returning or pays_for or before_the_clock)") ;;
        h) shared=(tests/evaluate/test_eval_gpu.py
                   -k "not kernelbench and not (gpumode or stream or patched or after_returning or pays_for or before_the_clock)") ;;
        t) shared=(tests/ops -k teaching) ;;
        *) echo "gpu_suite.sh: unknown part '$part' (a, b, c, d, e, f, g, h, l, p or t)" >&2; exit 2 ;;
    esac
    limit=200
    case $part in e|f|h) limit=${EVAL_TEST_TIMEOUT:-900} ;; esac
    timeouts=()
    if [ ${#timeout_flag[@]} -gt 0 ]; then timeouts=("${timeout_flag[@]}" "$limit"); fi
    : > "$logs/gpu-suite-part-$part.log"
    code=0
    if [ ${#shared[@]} -eq 0 ]; then
        run_pytest "$part" "${timeouts[@]}" "${args[@]}" || code=$?
    else
        # Part t's teaching tests are unmarked (they run in CI on the CPU's interpreter); the
        # gpu-marked teaching tests are their op's part's.
        only_gpu=(-m gpu); gpu_and="gpu and "
        if [ "$part" = t ]; then only_gpu=(-m "not gpu"); gpu_and="not gpu and "; fi
        if [ ${#parallel[@]} -gt 0 ]; then
            # whole_card tests hold many GiB each: alone, after the parallel pass, so that N
            # workers' caching allocators cannot take the card's memory between them
            run_pytest "$part" "${timeouts[@]}" -m "${gpu_and}not whole_card" "${parallel[@]}" \
                "${shared[@]}" || code=$?
            run_pytest "$part" "${timeouts[@]}" -m "${gpu_and}whole_card" "${shared[@]}" \
                || { c=$?; [ "$code" -ne 0 ] || code=$c; }
        else
            run_pytest "$part" "${timeouts[@]}" "${only_gpu[@]}" "${shared[@]}" || code=$?
        fi
    fi
    return "$code"
}

# Runs a group's parts (a,b,c) one after another; returns the first failing part's status.
run_group() {
    local group_status=0 part code
    for part in ${1//,/ }; do
        code=0
        run_part "$part" || code=$?
        if [ "$group_status" -eq 0 ] && [ "$code" -ne 0 ]; then group_status=$code; fi
    done
    return "$group_status"
}

# every part named, before anything runs: a typo fails at once, not after the other parts
for group in "${@:-a}"; do
    for part in ${group//,/ }; do
        case $part in
            a|b|c|d|e|f|g|h|l|p|t) ;;
            *) echo "gpu_suite.sh: unknown part '$part' (a, b, c, d, e, f, g, h, l, p or t)" >&2
               exit 2 ;;
        esac
    done
done

cards=${GPU_SUITE_CARDS:-1}
status=0
if [ "$cards" -gt 1 ] && [ "$#" -gt 1 ]; then
    if [ "$#" -gt "$cards" ]; then
        echo "gpu_suite.sh: $# groups for $cards cards (GPU_SUITE_CARDS): one group a card" >&2
        exit 2
    fi
    pids=()
    card=0
    for group in "$@"; do
        (
            export CUDA_VISIBLE_DEVICES=$card GPU_SUITE_CARD=$card
            run_group "$group"
        ) > "$logs/gpu-suite-group-$card.out" 2>&1 &
        pids+=("$!")
        card=$((card + 1))
    done
    for pid in "${pids[@]}"; do
        code=0
        wait "$pid" || code=$?
        if [ "$status" -eq 0 ] && [ "$code" -ne 0 ]; then status=$code; fi
    done
    cat "$logs"/gpu-suite-group-*.out
else
    for group in "${@:-a}"; do
        code=0
        run_group "$group" || code=$?
        if [ "$status" -eq 0 ] && [ "$code" -ne 0 ]; then status=$code; fi
    done
fi
exit "$status"
