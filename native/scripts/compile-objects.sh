#!/bin/sh
# Compiles C++ sources for the C++ test scripts in unity batches: the sources, sorted by path,
# are split into batches of TE_COMPILE_BATCH (8 by default, as CMake's unity builds), each batch
# is compiled as one translation unit that includes its sources, TE_COMPILE_JOBS batches at a
# time (one per CPU by default), and the batches' objects are printed, one per line. On 2 CPUs
# this takes a third of the compiler time of one object per source (the headers are parsed once
# per batch, not once per source). The sources of one batch share a translation unit: none may
# define a name another defines in its anonymous namespace (native/scripts/one-unit-check.sh
# checks the same of every addon's sources). A batch's members depend on the sources alone, not
# on the machine's CPUs, the order of the arguments or the locale's collation, so a source that
# leans on an #include of the source before it in its batch compiles the same way everywhere;
# TE_COMPILE_BATCH=1 compiles one unit per source.
#
# A batch is compiled again only when a file it includes (a source, a header) changed since
# its object was built (the compiler's own dependency list, -MMD), or when the flags differ
# from the last build into OUT_DIR. A batch is named after its list of sources, so that calls
# with different sources into one OUT_DIR keep their objects apart.
#   sh compile-objects.sh OUT_DIR "FLAGS" SOURCE...
# CXX picks the compiler (g++ by default). A failed compile fails the script. Paths are
# split on blanks (FLAGS holds the include folders): none may contain one.
set -eu
if [ $# -lt 3 ]; then
  echo "usage: sh compile-objects.sh OUT_DIR \"FLAGS\" SOURCE..." >&2
  exit 2
fi
out=$1
flags=$2
shift 2
mkdir -p "$out"
# Flags are part of what an object was built from: new flags, every object again.
if [ ! -f "$out/.flags" ] || [ "$(cat "$out/.flags")" != "${CXX:-g++} $flags" ]; then
  rm -f "$out"/*.o "$out"/*.o.d "$out"/*.cpp
  printf '%s' "${CXX:-g++} $flags" >"$out/.flags"
fi
# From here on, paths are split on blanks but never expanded as patterns: a source named
# x[1].cpp is that file, not x1.cpp.
set -f

# Whether an object is missing or older than any file its dependency list names.
stale() {
  [ -f "$1" ] && [ -f "$1.d" ] || return 0
  for dep in $(sed -e 's/^[^:]*://' -e 's/\\$//' "$1.d"); do
    [ "$dep" -nt "$1" ] && return 0
  done
  return 1
}

# positive NAME VALUE: exits 2 with a message unless VALUE is a positive integer.
positive() {
  [ "$2" -ge 1 ] 2>/dev/null || {
    echo "compile-objects.sh: $1 must be a positive integer, not '$2'" >&2
    exit 2
  }
}
jobs=${TE_COMPILE_JOBS:-$(nproc 2>/dev/null || echo 2)}
positive TE_COMPILE_JOBS "$jobs"
per=${TE_COMPILE_BATCH:-8}
positive TE_COMPILE_BATCH "$per"

# Writes each batch's unity source and prints "unity object" for each batch. A unity source is
# named after its content, so one already there holds this list: it is not written again (an
# unchanged batch stays up to date).
batches() {
  list=""
  n=0
  for src in "$@"; do
    # Included from OUT_DIR, a relative path would be looked up there: made absolute.
    case "$src" in /*) ;; *) src="$PWD/$src" ;; esac
    list="$list#include \"$src\"
"
    n=$((n + 1))
    if [ "$n" -eq "$per" ]; then
      emit "$list"
      list=""
      n=0
    fi
  done
  [ -z "$list" ] || emit "$list"
}
emit() {
  name="batch-$(printf '%s' "$1" | cksum | cut -d ' ' -f 1)"
  unity="$out/$name.cpp"
  [ -f "$unity" ] || printf '%s' "$1" >"$unity"
  printf '%s %s\n' "$unity" "$out/$name.o"
}

# Sorted in the C locale: the batches do not depend on how a caller's globs were ordered.
# shellcheck disable=SC2046  # the paths hold no blanks (above)
plan=$(batches $(printf '%s\n' "$@" | LC_ALL=C sort))
printf '%s\n' "$plan" | while read -r unity obj; do
  if stale "$obj"; then printf '%s\n%s\n' "$unity" "$obj"; fi
done | xargs -r -P "$jobs" -n 2 sh -c "${CXX:-g++} $flags -MMD -MF \"\$1.d\" -c \"\$0\" -o \"\$1\"" >&2

printf '%s\n' "$plan" | cut -d ' ' -f 2
