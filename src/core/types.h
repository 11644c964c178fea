// Plain identifiers shared by every module.
#pragma once

#include <cstdint>
#include <vector>

namespace deepinfer {

using TokenId = int32_t;
using TokenIds = std::vector<TokenId>;
using RequestId = uint64_t;

}  // namespace deepinfer
