// XXH3 with AVX2 (this file alone is compiled with -mavx2; digest.cpp picks it at run time
// on a CPU that has the instructions).
#include "digest_impl.h"

#define XXH_VECTOR XXH_AVX2
#include "digest_calls.inc"

namespace te::digest_impl {
const Calls kAvx2 = {reset_state, update_state, state_value};
}  // namespace te::digest_impl
