#!/usr/bin/env bash
# The second configuration of the suite (scripts/test.sh runs it after the first): everything built by clang++ with
# AddressSanitizer + UndefinedBehaviorSanitizer and libFuzzer coverage (-DAGOQ_FUZZ=ON), then
#   1. the single-process unit suites of every module but two (ctest -LE mpi): test_cli, which drives the binary
#      some hundred times, and test_parallel's whole multi-rank trainings are left to the first configuration;
#      then test_comm on 2 ranks under mpirun;
#   2. every fuzz target on its committed corpus (test_fuzz) and fuzzing each for a few seconds from it.
# Any sanitizer report fails the run (-fno-sanitize-recover, halt_on_error). Usage: scripts/sanitize.sh [SECONDS]
set -euo pipefail
cd "$(dirname "$0")/.."
fuzz_seconds=${1:-5}
bash scripts/install-deps.sh --sanitize
CXX=clang++ cmake -S . -B build-san -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo -DAGOQ_FUZZ=ON -DAGOQ_CUDA=OFF >/dev/null
targets=(rdata safetensors hf_config hf_index checkpoint token_file act_policy flags gguf tokenizer_json examples_jsonl)
ninja -C build-san test_core test_quant test_model test_optim test_data test_plan test_comm test_train test_fuzz \
  "${targets[@]/#/fuzz_}"

export OMP_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1
# Full stacks for every allocation (fast unwinding stops at libraries built without frame pointers) and Open MPI's
# plugins kept loaded, so that LeakSanitizer can name the library of each leak the suppressions allow.
export ASAN_OPTIONS=halt_on_error=1:detect_leaks=1:abort_on_error=1:fast_unwind_on_malloc=0:allocator_may_return_null=1
export LSAN_OPTIONS=suppressions=$PWD/tests/sanitize/lsan.supp:print_suppressions=0
export OMPI_MCA_mca_base_component_disable_dlclose=1
export UBSAN_OPTIONS=halt_on_error=1:print_stacktrace=1
# Tests of the binaries not built here (test_cli, test_parallel) are registered as <binary>_NOT_BUILT: skipped.
# So are four whose work is arithmetic the first configuration checks, 20-100x slower under ASan (together about
# two thirds of the suite's time under it): the bit allocator against brute force, attention's finite differences
# (the op table's attention_backward cases of 100 to 299 positions, on every backend; the short ones run),
# 150 steps of training on the corpus, and tokenizing the whole corpus through the binary.
slow='PlanBits.GreedyPathIsOptimalVsBruteForce|Backends/OpTable.MatchesTheReference/.*_attention_backward_B._T[12][0-9][0-9]_.*|Trainer.LearnsThePreparedCorpus|PrepareCli.WritesTokenizerSplitsAndMeta'
(cd build-san && ctest --output-on-failure --timeout 900 -j2 -LE mpi -E "_NOT_BUILT\$|^($slow)\$")
# The communicator and the 8-bit all-reduce on 2 ranks (mpirun's local ranks inherit the sanitizer settings).
(cd build-san && ctest --output-on-failure --timeout 900 -R '^comm_np2$')

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
for t in "${targets[@]}"; do
  mkdir -p "$work/$t"
  cp tests/fuzz/corpus/$t/* "$work/$t/"
  build-san/fuzz_$t -max_total_time="$fuzz_seconds" -rss_limit_mb=2048 -malloc_limit_mb=512 -timeout=5 \
    -max_len=4096 -artifact_prefix="$work/" "$work/$t" 2>"$work/$t.log" ||
    { tail -40 "$work/$t.log"; echo "sanitize: fuzz_$t found a bug (input in $work)"; trap - EXIT; exit 1; }
  echo "sanitize: fuzz_$t: $(grep -o 'Done [0-9]* runs' "$work/$t.log" || echo 'ran')"
done
