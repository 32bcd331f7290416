#include <gtest/gtest.h>

#include "tessera/config.h"
#include "tessera/errors.h"

using namespace tessera;

TEST(DeviceList, AcceptsAutoNamesIndicesAndLists) {
  EXPECT_EQ(parse_device_list(""), (std::vector<DeviceSpec>{{"auto", std::nullopt}}));
  EXPECT_EQ(parse_device_list("auto"), (std::vector<DeviceSpec>{{"auto", std::nullopt}}));
  EXPECT_EQ(parse_device_list("vulkan:1"), (std::vector<DeviceSpec>{{"vulkan", 1}}));
  EXPECT_EQ(parse_device_list(" Vulkan , cpu "),
            (std::vector<DeviceSpec>{{"vulkan", std::nullopt}, {"cpu", std::nullopt}}));
  EXPECT_EQ(parse_device_list("opencl:0,opencl:1"),
            (std::vector<DeviceSpec>{{"opencl", 0}, {"opencl", 1}}));
  EXPECT_EQ(parse_device_list("my-plugin_2"),
            (std::vector<DeviceSpec>{{"my-plugin_2", std::nullopt}}));
}

class BadDeviceList : public ::testing::TestWithParam<const char*> {};

TEST_P(BadDeviceList, IsAConfigErrorNamingTheVariableAndValue) {
  try {
    parse_device_list(GetParam());
    FAIL() << "accepted '" << GetParam() << "'";
  } catch (const ConfigError& e) {
    const std::string msg = e.what();
    EXPECT_NE(msg.find("TESSERA_DEVICE='"), std::string::npos) << msg;
    EXPECT_NE(msg.find("Use auto"), std::string::npos) << msg;
  }
}

INSTANTIATE_TEST_SUITE_P(Malformed, BadDeviceList,
                         ::testing::Values(",", "cpu,", ",cpu", "cpu,,vulkan", "vulkan:", ":1",
                                           "vulkan:-1", "vulkan:x", "vulkan:1x", "vulkan:1:2",
                                           "vulkan: 1 2", "9cpu", "cp u", "cpu;vulkan", "auto:0",
                                           "auto,cpu", "cpu,cpu", "vulkan:99999999999", "gpu!",
                                           "\x01", "cpu:+1"));

TEST(Fallback, OffOnAndChains) {
  EXPECT_TRUE(parse_fallback("").empty());
  EXPECT_TRUE(parse_fallback("0").empty());
  EXPECT_TRUE(parse_fallback("off").empty());
  EXPECT_EQ(parse_fallback("1"), (std::vector<DeviceSpec>{{"cpu", std::nullopt}}));
  EXPECT_EQ(parse_fallback("TRUE"), (std::vector<DeviceSpec>{{"cpu", std::nullopt}}));
  EXPECT_EQ(parse_fallback("opencl,cpu"),
            (std::vector<DeviceSpec>{{"opencl", std::nullopt}, {"cpu", std::nullopt}}));
  EXPECT_THROW(parse_fallback("auto"), ConfigError);
  EXPECT_THROW(parse_fallback("2"), ConfigError);
  EXPECT_THROW(parse_fallback("cpu,"), ConfigError);
}

TEST(LogLevel, NamesAndErrors) {
  EXPECT_EQ(parse_log_level(""), 3);
  EXPECT_EQ(parse_log_level("trace"), 0);
  EXPECT_EQ(parse_log_level("DEBUG"), 1);
  EXPECT_EQ(parse_log_level("off"), 6);
  EXPECT_THROW(parse_log_level("verbose"), ConfigError);
  EXPECT_THROW(parse_log_level("3"), ConfigError);
}

TEST(NameList, PluginNames) {
  EXPECT_EQ(parse_name_list("opencl, vulkan", "X"), (std::vector<std::string>{"opencl", "vulkan"}));
  EXPECT_TRUE(parse_name_list("", "X").empty());
  EXPECT_THROW(parse_name_list("opencl,", "X"), ConfigError);
  EXPECT_THROW(parse_name_list("a b", "X"), ConfigError);
}

TEST(PathList, SkipsEmptyItemsAndMakesAbsolute) {
  const auto dirs = parse_path_list("/a::/b/../c:");
  ASSERT_EQ(dirs.size(), 2u);
  EXPECT_EQ(dirs[0], "/a");
  EXPECT_EQ(dirs[1], "/c");
  EXPECT_TRUE(parse_path_list("rel").at(0).is_absolute());
}
