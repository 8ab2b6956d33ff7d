#!/usr/bin/env bash
# Builds a libFuzzer target for one of the C extensions and runs it.
#
#   fuzz/run.sh recordwalk|recordcodec|requestread [libFuzzer arguments...]
#
# With no arguments after the target it fuzzes for 60 s from the seed corpus in
# build/fuzz/<target>-seeds (tests/test_c_fuzz.py writes one) into build/fuzz/<target>-corpus.
# Needs clang with its sanitizer runtimes (Debian: clang, libclang-rt-14-dev; make test's
# tool installer adds them) and the Python the project runs on ($PYTHON, default python3).
set -euo pipefail
cd "$(dirname "$0")/.."
target=${1:?usage: fuzz/run.sh recordwalk|recordcodec|requestread [libFuzzer arguments...]}
shift
case "$target" in
  recordwalk | recordcodec | requestread) ;;
  *) echo "fuzz/run.sh: no target '$target' (recordwalk, recordcodec, requestread)" >&2; exit 2 ;;
esac
python=${PYTHON:-python3}
read -r include libdir ldlibrary < <("$python" -c 'import sysconfig as s; print(s.get_paths()["include"], s.get_config_var("LIBDIR"), s.get_config_var("LDLIBRARY"))')
lib=${ldlibrary#lib}
lib=${lib%.so*}
lib=${lib%.a}
out=build/fuzz
mkdir -p "$out/$target-corpus" "$out/$target-seeds"
clang -g -O1 -fsanitize=fuzzer,address,undefined -fno-sanitize-recover=undefined \
  -I"$include" "fuzz/$target.c" -L"$libdir" -Wl,-rpath,"$libdir" -l"$lib" -lm -ldl \
  -o "$out/$target"
if [ $# -eq 0 ]; then
  set -- -max_total_time=60
fi
# Python's own allocations at exit are not the target's leaks.
export ASAN_OPTIONS=${ASAN_OPTIONS:-detect_leaks=0}
exec "$out/$target" -artifact_prefix="$out/$target-" -rss_limit_mb=2048 -malloc_limit_mb=512 "$@" "$out/$target-corpus" "$out/$target-seeds"
