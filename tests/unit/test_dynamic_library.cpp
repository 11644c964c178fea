// base/dynamic_library.h: the first name the loader opens wins, each failure's reason is kept, and
// ResolveSymbol names the first symbol a library lacks.
#include "base/dynamic_library.h"

#include <gtest/gtest.h>

#include <string>

namespace deepinfer {
namespace {

TEST(DynamicLibrary, OpensTheFirstNameThatLoads) {
  const OpenedLibrary opened = OpenFirstLibrary({"/nonexistent/libnothing.so", "libc.so.6", "libm.so.6"});
  ASSERT_NE(opened.handle, nullptr);
  EXPECT_EQ(opened.path, "libc.so.6");
  EXPECT_NE(opened.tried.find("libnothing.so"), std::string::npos) << "the name before it: " << opened.tried;
  EXPECT_EQ(opened.tried.find("libm.so"), std::string::npos) << "names after it are not tried";
}

TEST(DynamicLibrary, KeepsEveryReasonWhereNothingOpens) {
  const OpenedLibrary opened = OpenFirstLibrary({"/nonexistent/liba.so", "/nonexistent/libb.so"});
  EXPECT_EQ(opened.handle, nullptr);
  EXPECT_TRUE(opened.path.empty());
  const size_t a = opened.tried.find("liba.so"), b = opened.tried.find("libb.so");
  ASSERT_NE(a, std::string::npos) << opened.tried;
  ASSERT_NE(b, std::string::npos) << opened.tried;
  EXPECT_LT(a, b);
  EXPECT_NE(opened.tried.find("; "), std::string::npos) << opened.tried;
}

TEST(DynamicLibrary, ResolveSymbolNamesTheFirstMissing) {
  const OpenedLibrary libc = OpenFirstLibrary({"libc.so.6"});
  ASSERT_NE(libc.handle, nullptr);
  std::string missing;
  size_t (*length)(const char*) = nullptr;
  int (*absent)() = nullptr;
  int (*also_absent)() = nullptr;
  ResolveSymbol(libc.handle, "strlen", &length, &missing);
  ASSERT_NE(length, nullptr);
  EXPECT_EQ(length("four"), 4u);
  EXPECT_TRUE(missing.empty());
  ResolveSymbol(libc.handle, "deepinfer_no_such_symbol", &absent, &missing);
  ResolveSymbol(libc.handle, "deepinfer_nor_this_one", &also_absent, &missing);
  EXPECT_EQ(absent, nullptr);
  EXPECT_EQ(also_absent, nullptr);
  EXPECT_EQ(missing, "deepinfer_no_such_symbol");
}

}  // namespace
}  // namespace deepinfer
