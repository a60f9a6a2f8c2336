// libFuzzer's entry point for one target of fuzz_target.h, chosen at compile time (-DAGOQ_FUZZ_FN=rdata, ...).
#include "tests/fuzz/fuzz_target.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) { return agoq::fuzz::AGOQ_FUZZ_FN(data, size); }
