#!/usr/bin/env bash
# Builds the fuzz targets (fuzz/, libFuzzer through libfuzzer-sys) with
# coverage instrumentation on the stable toolchain, and runs each for a
# bounded time from its committed seed corpus (fuzz/corpus/<target>).
#
#   scripts/fuzz.sh [SECONDS_PER_TARGET] [TARGET ...]    # default 60, all targets
#
# New inputs go to fuzz/work/<target> (not committed). A crash, timeout or
# out-of-memory input is saved as fuzz/artifacts/<target>/… and the script
# fails; each such input belongs in a regression test. Prints each target's
# executions and coverage at the end.
set -euo pipefail
cd "$(dirname "$0")/../fuzz"
secs=${1:-60}
shift || true
targets=("$@")
[ ${#targets[@]} -gt 0 ] || targets=(gguf safetensors config_plan tokenizer template tool_call request_body hub wav)

# What cargo-fuzz passes for a build without a sanitizer: SanitizerCoverage
# for libFuzzer's feedback. These are stable rustc flags, so no nightly.
export RUSTFLAGS="-Cpasses=sancov-module -Cllvm-args=-sanitizer-coverage-level=4 \
-Cllvm-args=-sanitizer-coverage-inline-8bit-counters -Cllvm-args=-sanitizer-coverage-pc-table \
-Cllvm-args=-sanitizer-coverage-trace-compares --cfg fuzzing"
# An explicit --target keeps the flags off build scripts and proc macros.
host=$(rustc -vV | sed -n 's/^host: //p')
cargo build --release --locked --bins --target "$host"
bin="target/$host/release"

status=0
summary=()
for t in "${targets[@]}"; do
  mkdir -p "work/$t" "artifacts/$t"
  log="work/$t.log"
  echo "== fuzzing $t for ${secs}s"
  if ! "$bin/$t" "work/$t" "corpus/$t" -max_total_time="$secs" -timeout=10 -rss_limit_mb=2048 \
      -artifact_prefix="artifacts/$t/" -print_final_stats=1 >"$log" 2>&1; then
    status=1
    echo "!! $t found a failing input:"; tail -n 30 "$log"
  fi
  runs=$(grep -o 'stat::number_of_executed_units: *[0-9]*' "$log" | grep -o '[0-9]*$' || echo "?")
  cov=$(grep -o 'cov: [0-9]*' "$log" | tail -n 1 | grep -o '[0-9]*' || echo "?")
  summary+=("$t: $runs executions, coverage $cov")
done
printf '%s\n' "== fuzz summary (${secs}s per target)" "${summary[@]}"
exit $status
