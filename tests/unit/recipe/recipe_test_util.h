// Helpers shared by the recipe tests: test-data files.
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "recipe/conversation.h"

namespace deepinfer::recipe::testing {

inline std::string DataPath(const std::string& relative) {
  return std::string(DEEPINFER_TEST_DATA_DIR) + "/recipe/" + relative;
}

inline std::string ReadFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  EXPECT_TRUE(in.good()) << "cannot open " << path;
  std::ostringstream text;
  text << in.rdbuf();
  return text.str();
}

inline OrderedJson ReadJson(const std::string& path) { return OrderedJson::parse(ReadFile(path)); }

// Sorted paths of the *.json files in a test-data folder.
inline std::vector<std::string> JsonFiles(const std::string& folder) {
  std::vector<std::string> files;
  for (const auto& entry : std::filesystem::directory_iterator(DataPath(folder))) {
    if (entry.path().extension() == ".json") files.push_back(entry.path().string());
  }
  std::sort(files.begin(), files.end());
  return files;
}

inline std::string WithoutExtension(const std::string& path) {
  return path.substr(0, path.rfind('.'));
}

// "first difference at byte N: ...expected... vs ...actual..." for long prompt strings.
inline std::string FirstDifference(const std::string& expected, const std::string& actual) {
  size_t i = 0;
  while (i < expected.size() && i < actual.size() && expected[i] == actual[i]) ++i;
  const size_t from = i > 40 ? i - 40 : 0;
  return "first difference at byte " + std::to_string(i) + "\n  expected: ..." +
         expected.substr(from, 120) + "\n  actual:   ..." + actual.substr(from, 120);
}

}  // namespace deepinfer::recipe::testing
