// ArenaLayout: the device arena's bookkeeping, exact offsets (no device needed).
#include <gtest/gtest.h>

#include "base/error.h"
#include "device/arena.h"

namespace deepinfer {
namespace {

TEST(ArenaLayout, CarvesAlignedRegionsInOrder) {
  ArenaLayout a(4096);
  EXPECT_EQ(a.Carve(100, "weights"), 0u);
  EXPECT_EQ(a.Carve(256, "state"), 256u);   // 100 rounded up to the 256-byte alignment
  EXPECT_EQ(a.Carve(0, "empty"), 512u);
  EXPECT_EQ(a.Carve(1, "flag"), 512u);      // an empty region takes no space
  EXPECT_EQ(a.Carve(3000, "workspace"), 768u);
  EXPECT_EQ(a.used(), 3768u);
  EXPECT_EQ(a.available(), 328u);
  EXPECT_EQ(a.CheckIntegrity(), "");
  ASSERT_EQ(a.regions().size(), 5u);
  EXPECT_EQ(a.regions()[4].label, "workspace");
  EXPECT_NE(a.Describe().find("workspace"), std::string::npos);
}

TEST(ArenaLayout, RefusesWhatDoesNotFitAndNamesIt) {
  ArenaLayout a(1 << 20);
  a.Carve(1000, "weights");
  try {
    a.Carve(1 << 20, "kv rows");
    FAIL() << "no error";
  } catch (const Error& e) {
    const std::string what = e.what();
    EXPECT_NE(what.find("'kv rows' needs 1.0 MiB"), std::string::npos) << what;
    EXPECT_NE(what.find("of the 1.0 MiB arena"), std::string::npos) << what;
  }
  EXPECT_EQ(a.used(), 1000u);  // nothing changed
  EXPECT_EQ(a.CheckIntegrity(), "");
  // Exactly the rest fits.
  EXPECT_EQ(a.Carve((1 << 20) - 1024, "rest"), 1024u);
  EXPECT_EQ(a.available(), 0u);
}

}  // namespace
}  // namespace deepinfer
