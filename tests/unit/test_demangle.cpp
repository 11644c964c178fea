// Demangled: mangled symbols demangle, anything else comes back as it is, null as "?".
#include <gtest/gtest.h>

#include "base/demangle.h"

namespace deepinfer {
namespace {

TEST(Demangled, SymbolsDemangleAndOtherNamesStay) {
  EXPECT_EQ(Demangled("_ZN9deepinfer4cuda3FooEPKfi"), "deepinfer::cuda::Foo(float const*, int)");
  EXPECT_EQ(Demangled("_Z3BarIiEvT_"), "void Bar<int>(int)");
  EXPECT_EQ(Demangled("RouteKernel"), "RouteKernel");
  EXPECT_EQ(Demangled(""), "");
  EXPECT_EQ(Demangled(nullptr), "?");
}

}  // namespace
}  // namespace deepinfer
