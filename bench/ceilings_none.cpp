// CPU-only build: the measurements need the CUDA runtime and a GPU.
#include "base/error.h"
#include "bench/ceilings.h"

namespace deepinfer::bench {
namespace {

[[noreturn]] void NoCuda() { DI_THROW("ceilings need the CUDA build (configure with -DDEEPINFER_CUDA=ON)"); }

}  // namespace

GemmTiming TimeGemm(int, GemmKind, GemmShape, int) { NoCuda(); }
GemmTiming TimeOwnFp8Linear(int, GemmShape, int) { NoCuda(); }
std::vector<float> RunGemm(int, GemmKind, GemmShape, const GemmOperands&) { NoCuda(); }
CopyTiming TimeDeviceCopy(int, size_t, int) { NoCuda(); }
Ceilings MeasureCeilings(int) { NoCuda(); }

}  // namespace deepinfer::bench
