// CPU-only build: the read patterns need the CUDA runtime and a GPU.
#include "base/error.h"
#include "bench/read_patterns.h"

namespace deepinfer::bench {
namespace {

[[noreturn]] void NoCuda() { DI_THROW("read patterns need the CUDA build (configure with -DDEEPINFER_CUDA=ON)"); }

}  // namespace

ReadPatternsReport TimeReadPatterns(int, const std::vector<ReadPattern>&, int) { NoCuda(); }
uint64_t ReadPatternSumForTesting(int, const ReadPattern&, const std::vector<uint8_t>&, int64_t) { NoCuda(); }
uint64_t PlainReadSumForTesting(int, const std::vector<uint8_t>&) { NoCuda(); }

}  // namespace deepinfer::bench
