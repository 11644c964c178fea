// CPU-only build: the phase chains need the CUDA runtime and a GPU.
#include "base/error.h"
#include "bench/phases.h"

namespace deepinfer::bench {

PhasesReport TimePhases(int, const std::vector<Phase>&, const std::string&, int) {
  DI_THROW("phases need the CUDA build (configure with -DDEEPINFER_CUDA=ON)");
}

}  // namespace deepinfer::bench
