#include "src/base/json_field.h"

#include <gtest/gtest.h>

#include <cstdint>
#include <string>
#include <vector>

namespace shoal {
namespace {

const nlohmann::json kMessage = nlohmann::json::parse(R"({
  "replica": 2, "tid": 18446744073709551615, "delta": -3, "ok": true, "rate": 1.5,
  "name": "r2", "failures": ["a", "b"], "nothing": null, "big": 4294967296
})");

TEST(JsonField, ReadsFieldsOfEveryType) {
  EXPECT_EQ(*json_field<uint32_t>(kMessage, "replica"), 2u);
  EXPECT_EQ(*json_field<uint64_t>(kMessage, "tid"), UINT64_MAX);
  EXPECT_EQ(*json_field<int>(kMessage, "delta"), -3);
  EXPECT_EQ(*json_field<int64_t>(kMessage, "replica"), 2);  // unsigned JSON into a signed T
  EXPECT_TRUE(*json_field<bool>(kMessage, "ok"));
  EXPECT_EQ(*json_field<double>(kMessage, "rate"), 1.5);
  EXPECT_EQ(*json_field<double>(kMessage, "replica"), 2.0);  // any number is a double
  EXPECT_EQ(*json_field<std::string>(kMessage, "name"), "r2");
  EXPECT_EQ(*json_field<std::vector<std::string>>(kMessage, "failures"),
            (std::vector<std::string>{"a", "b"}));
  EXPECT_TRUE(json_field<nlohmann::json>(kMessage, "failures")->is_array());
}

TEST(JsonField, MissingWrongTypeAndOutOfRangeNameTheField) {
  auto missing = json_field<uint32_t>(kMessage, "shard");
  ASSERT_FALSE(missing.ok());
  EXPECT_EQ(missing.status().code(), Code::kInvalidArgument);
  EXPECT_EQ(missing.status().message(), "'shard': missing");

  auto text = json_field<uint32_t>(kMessage, "name");
  ASSERT_FALSE(text.ok());
  EXPECT_EQ(text.status().message(), "'name': a string, not an unsigned integer of 32 bits");

  auto too_big = json_field<uint32_t>(kMessage, "big");
  ASSERT_FALSE(too_big.ok());
  EXPECT_EQ(too_big.status().message(),
            "'big': the number 4294967296, not an unsigned integer of 32 bits");
  auto negative = json_field<uint64_t>(kMessage, "delta");
  ASSERT_FALSE(negative.ok());
  EXPECT_EQ(negative.status().message(),
            "'delta': the number -3, not an unsigned integer of 64 bits");
  EXPECT_FALSE(json_field<int8_t>(kMessage, "big").ok());
  EXPECT_FALSE(json_field<bool>(kMessage, "replica").ok());
  EXPECT_FALSE(json_field<std::string>(kMessage, "nothing").ok());

  auto mixed = json_field<std::vector<std::string>>(nlohmann::json{{"f", {"a", 1}}}, "f");
  ASSERT_FALSE(mixed.ok());
  EXPECT_EQ(mixed.status().message(), "'f': an array, not a list of strings");
}

TEST(JsonField, NotAnObjectIsAnErrorNotAnException) {
  for (const nlohmann::json& j :
       {nlohmann::json(nullptr), nlohmann::json(3), nlohmann::json("x"), nlohmann::json::array()}) {
    auto r = json_field<uint32_t>(j, "replica");
    ASSERT_FALSE(r.ok()) << j.dump();
    EXPECT_NE(r.status().message().find("'replica': the message is"), std::string::npos)
        << r.status().message();
    uint32_t out = 7;
    EXPECT_FALSE(json_optional_field(j, "replica", &out).ok()) << j.dump();
    EXPECT_EQ(out, 7u);
  }
}

TEST(JsonField, OptionalFieldsKeepTheirDefaultWhenAbsentOrNull) {
  uint64_t tid = 42;
  EXPECT_TRUE(json_optional_field(kMessage, "absent", &tid).ok());
  EXPECT_EQ(tid, 42u);
  EXPECT_TRUE(json_optional_field(kMessage, "nothing", &tid).ok());
  EXPECT_EQ(tid, 42u);
  EXPECT_TRUE(json_optional_field(kMessage, "tid", &tid).ok());
  EXPECT_EQ(tid, UINT64_MAX);
  std::string name = "unchanged";
  const Status wrong = json_optional_field(kMessage, "replica", &name);
  EXPECT_EQ(wrong.message(), "'replica': the number 2, not a string");
  EXPECT_EQ(name, "unchanged");
}

TEST(JsonField, ParsePeerJsonRefusesNonJson) {
  EXPECT_TRUE(parse_peer_json(R"({"a":1})", "hello").ok());
  for (const char* text : {"", "{", "not json", "{\"a\":}", "\xff\xfe"}) {
    auto r = parse_peer_json(text, "hello");
    ASSERT_FALSE(r.ok()) << text;
    EXPECT_EQ(r.status().message(), "hello: not JSON");
  }
}

}  // namespace
}  // namespace shoal
