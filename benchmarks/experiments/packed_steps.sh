# Sourced by the GPU scripts here: the device tool brings back 8 files at most, so each script
# writes into a scratch folder ($out) that pack() archives as $OUT/results.tgz. step() packs
# again before printing its heading, so a call cut short by its time limit keeps what came
# before. Sets: out, pack, step, start.
final=${OUT:-.}
out=$(mktemp -d)
pack() { tar czf "$final/results.tgz" -C "$out" . ; }
start=$SECONDS
step() { pack; echo "== $1 ($((SECONDS - start)) s)"; }
