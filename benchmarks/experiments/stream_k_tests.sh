# Sourced by the step-19 device scripts (stream_k_on_gpu.sh, stream_k_calibrate_on_gpu.sh),
# after packed_steps.sh: step 19's GPU tests under a time limit (a fix-up that waits on a flag
# nobody sets would hang), tests/test_hgemm_stream_k.py and every test_hgemm.py test of
# hgemm:19. On a failure it packs what there is and exits: nothing is timed unchecked.
stream_k_tests() {
    step "tests"
    timeout 150 python3 -m pytest -m gpu -q -p no:cacheprovider tests/test_hgemm_stream_k.py \
        tests/test_hgemm.py -k "stream_k or hgemm:19" > "$out/tests.log" 2>&1
    local status=$?
    tail -3 "$out/tests.log"
    if [ "$status" != 0 ]; then step "tests failed (exit $status): no timing"; pack; exit 1; fi
}
