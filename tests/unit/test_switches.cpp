// ParseCountSwitch and ParseOnOffSwitch: the value when unset, the values taken, and errors that
// name the variable and quote the value.
#include <gtest/gtest.h>

#include <string>

#include "base/error.h"
#include "base/switches.h"

namespace deepinfer {
namespace {

// The message of the Error that fn throws; a failure if it throws none.
template <typename Fn>
std::string ErrorOf(Fn&& fn) {
  try {
    fn();
  } catch (const Error& e) {
    return e.what();
  }
  ADD_FAILURE() << "no error";
  return {};
}

TEST(Switches, CountsAreDecimalDigitsOrTheUnsetValue) {
  EXPECT_EQ(ParseCountSwitch("DEEPINFER_X", nullptr, 7, "a count"), 7);
  EXPECT_EQ(ParseCountSwitch("DEEPINFER_X", "", -1, "a count"), -1);
  EXPECT_EQ(ParseCountSwitch("DEEPINFER_X", "0", 7, "a count"), 0);
  EXPECT_EQ(ParseCountSwitch("DEEPINFER_X", "007", 7, "a count"), 7);
  EXPECT_EQ(ParseCountSwitch("DEEPINFER_X", "999999999", 7, "a count"), 999999999);
  for (const char* bad : {"-1", "+1", "1e3", "12 ", "0x10", "1000000000"}) {
    const std::string message = ErrorOf([&] { ParseCountSwitch("DEEPINFER_X", bad, 7, "a token count"); });
    EXPECT_EQ(message, std::string("DEEPINFER_X must be a token count, got '") + bad + "'");
  }
}

TEST(Switches, OnOffIsZeroOrOneOrTheUnsetValue) {
  EXPECT_TRUE(ParseOnOffSwitch("DEEPINFER_Y", nullptr, true));
  EXPECT_FALSE(ParseOnOffSwitch("DEEPINFER_Y", "", false));
  EXPECT_TRUE(ParseOnOffSwitch("DEEPINFER_Y", "1", false));
  EXPECT_FALSE(ParseOnOffSwitch("DEEPINFER_Y", "0", true));
  for (const char* bad : {"on", "true", "2", "01", " 1"}) {
    const std::string message = ErrorOf([&] { ParseOnOffSwitch("DEEPINFER_Y", bad, true); });
    EXPECT_EQ(message, std::string("DEEPINFER_Y must be 0 or 1, got '") + bad + "'");
  }
}

}  // namespace
}  // namespace deepinfer
