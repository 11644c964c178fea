// `deepinfer bench steps` (apps/bench_steps.cpp), registered under `deepinfer bench`.
#pragma once

#include <CLI/CLI.hpp>

namespace deepinfer::apps {

void AddStepBench(CLI::App* bench);

}  // namespace deepinfer::apps
