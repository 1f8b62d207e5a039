# Sourced by the scripts that build and run one C++ test plain or under a sanitizer
# (plugins/*/scripts/*-test.sh): reads the mode argument and runs the binary so that a
# sanitizer report fails the run.
#   sanitizer_mode "$1" "usage line"   sets $mode (plain, tsan, asan-ubsan) and $flags; a bad
#                                      mode prints the usage line and exits 2
#   run_reporting BINARY               runs it; a report stops it with status 66

sanitizer_mode() {
  case "${1:-plain}" in
    plain) mode=plain; flags="" ;;
    --tsan) mode=tsan; flags="-fsanitize=thread" ;;
    --asan-ubsan) mode=asan-ubsan; flags="-fsanitize=address,undefined -fno-sanitize-recover=undefined" ;;
    *) echo "$2" >&2; exit 2 ;;
  esac
}

run_reporting() {
  # A report stops the run with a distinct status (66) instead of being printed and ignored.
  TSAN_OPTIONS="halt_on_error=1 exitcode=66 ${TSAN_OPTIONS:-}" ASAN_OPTIONS="halt_on_error=1 exitcode=66 ${ASAN_OPTIONS:-}" \
    UBSAN_OPTIONS="halt_on_error=1 exitcode=66 print_stacktrace=1 ${UBSAN_OPTIONS:-}" "$1"
}
