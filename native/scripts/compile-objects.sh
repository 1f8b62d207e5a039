#!/bin/sh
# Compiles C++ sources to objects for the C++ test scripts, as many at once as there are
# CPUs, and prints the objects' paths in the order of the sources. A source is compiled again
# only when it or a header it includes changed since its object was built (the compiler's own
# dependency list, -MMD), or when the flags differ from the last build into OUT_DIR.
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
  rm -f "$out"/*.o "$out"/*.o.d
  printf '%s' "${CXX:-g++} $flags" >"$out/.flags"
fi

# The object of a source: its path with slashes turned into underscores, so that two sources
# with the same name in different folders do not share one.
object_of() { printf '%s/%s.o' "$out" "$(printf '%s' "$1" | sed -e 's|^/||' -e 's|/|_|g' -e 's|\.[a-z]*$||')"; }

# Whether an object is missing or older than any file its dependency list names.
stale() {
  [ -f "$1" ] && [ -f "$1.d" ] || return 0
  for dep in $(sed -e 's/^[^:]*://' -e 's/\\$//' "$1.d"); do
    [ "$dep" -nt "$1" ] && return 0
  done
  return 1
}

jobs=$(nproc 2>/dev/null || echo 2)
for src in "$@"; do
  obj=$(object_of "$src")
  if stale "$obj"; then printf '%s\n%s\n' "$src" "$obj"; fi
done | xargs -r -P "$jobs" -n 2 sh -c "${CXX:-g++} $flags -MMD -MF \"\$1.d\" -c \"\$0\" -o \"\$1\"" >&2

for src in "$@"; do object_of "$src"; printf '\n'; done
