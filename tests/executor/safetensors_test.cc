// safetensors: round trip of every dtype the trainer writes, the exact byte
// layout other readers expect, and hostile files rejected with one line.
#include "executor/checkpoint/safetensors.h"

#include <unistd.h>

#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <map>
#include <string>

#include <gtest/gtest.h>
#include <torch/torch.h>

#include "base/user_error.h"

namespace llmplan::checkpoint {
namespace {

class SafetensorsTest : public ::testing::Test {
 protected:
  void SetUp() override {
    std::string pattern = (std::filesystem::temp_directory_path() / "llmplan_safetensors_XXXXXX").string();
    ASSERT_NE(::mkdtemp(pattern.data()), nullptr);
    dir_ = pattern;
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }

  // A file with header length `length`, then `header`, then `data`.
  std::string WriteRaw(const std::string& name, uint64_t length, const std::string& header, const std::string& data) {
    const std::string path = (dir_ / name).string();
    std::ofstream out(path, std::ios::binary);
    out.write(reinterpret_cast<const char*>(&length), 8);
    out << header << data;
    return path;
  }
  std::string WriteHeader(const std::string& name, const std::string& header, const std::string& data) {
    return WriteRaw(name, header.size(), header, data);
  }
  std::string ReadAll(const std::string& path) {
    std::ifstream in(path, std::ios::binary);
    return std::string((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  }
  // The one-line UserError message of opening `path`.
  std::string OpenError(const std::string& path) {
    try {
      SafetensorsReader reader(path);
    } catch (const UserError& e) {
      const std::string message = e.what();
      EXPECT_EQ(message.find('\n'), std::string::npos) << message;
      EXPECT_NE(message.find(path), std::string::npos) << message;
      return message;
    }
    ADD_FAILURE() << "expected a UserError for " << path;
    return "";
  }

  std::filesystem::path dir_;
};

TEST_F(SafetensorsTest, RoundTripEveryDtype) {
  torch::manual_seed(0);
  std::map<std::string, torch::Tensor> tensors = {
      {"model.embed_tokens.weight", torch::randn({7, 4}).to(torch::kBFloat16)},
      {"model.norm.weight", torch::randn({4})},
      {"half", torch::randn({2, 3, 2}).to(torch::kFloat16)},
      {"double", torch::randn({3}, torch::kFloat64)},
      {"step", torch::tensor(int64_t{1234567890123})},  // scalar: shape []
      {"ids", torch::arange(10, torch::kInt32)},
      {"bytes", torch::arange(5, torch::kUInt8)},
      {"mask", torch::tensor({true, false, true})},
      {"empty", torch::empty({0, 4})},
      {"transposed", torch::arange(6, torch::kFloat32).reshape({2, 3}).t()},  // non-contiguous
  };
  const std::string path = (dir_ / "model.safetensors").string();
  WriteSafetensors(path, tensors, {{"format", "pt"}, {"step", "12"}});

  SafetensorsContents read = ReadSafetensors(path);
  EXPECT_EQ(read.metadata, (std::map<std::string, std::string>{{"format", "pt"}, {"step", "12"}}));
  ASSERT_EQ(read.tensors.size(), tensors.size());
  for (const auto& [name, original] : tensors) {
    const torch::Tensor& t = read.tensors.at(name);
    EXPECT_EQ(t.scalar_type(), original.scalar_type()) << name;
    EXPECT_EQ(t.sizes(), original.sizes()) << name;
    EXPECT_TRUE(t.is_contiguous()) << name;
    EXPECT_TRUE(torch::equal(t, original)) << name;
  }
  SafetensorsReader reader(path);
  EXPECT_EQ(reader.entries().at("model.embed_tokens.weight").dtype, "BF16");
  EXPECT_TRUE(reader.Contains("step"));
  EXPECT_TRUE(reader.entries().at("step").shape.empty());
  EXPECT_THROW(reader.Read("lm_head.weight"), UserError);
  EXPECT_FALSE(std::filesystem::exists(path + ".tmp." + std::to_string(::getpid())));
}

TEST_F(SafetensorsTest, ByteLayoutMatchesTheReferenceWriter) {
  const std::string path = (dir_ / "layout.safetensors").string();
  WriteSafetensors(path, {{"b", torch::tensor({1.0f, 2.0f})}, {"a", torch::tensor({int64_t{7}})}});
  const std::string bytes = ReadAll(path);
  uint64_t n = 0;
  std::memcpy(&n, bytes.data(), 8);
  EXPECT_EQ(n % 8, 0u);  // data section 8-byte aligned
  const std::string header = bytes.substr(8, n);
  EXPECT_EQ(header.find_last_not_of(' ') + 1,
            std::string(R"({"a":{"data_offsets":[0,8],"dtype":"I64","shape":[1]},)"
                        R"("b":{"data_offsets":[8,16],"dtype":"F32","shape":[2]}})")
                .size());
  EXPECT_EQ(header.rfind(R"({"a":{"data_offsets":[0,8])", 0), 0u) << header;  // ordered by name
  ASSERT_EQ(bytes.size(), 8 + n + 16);
  int64_t a;
  float b[2];
  std::memcpy(&a, bytes.data() + 8 + n, 8);
  std::memcpy(b, bytes.data() + 8 + n + 8, 8);
  EXPECT_EQ(a, 7);
  EXPECT_EQ(b[0], 1.0f);
  EXPECT_EQ(b[1], 2.0f);
}

TEST_F(SafetensorsTest, ReadsUint16TokensWidened) {
  const uint16_t values[3] = {0, 40000, 65535};
  const std::string path = WriteHeader("u16.safetensors", R"({"t":{"dtype":"U16","shape":[3],"data_offsets":[0,6]}})",
                                       std::string(reinterpret_cast<const char*>(values), 6));
  const torch::Tensor t = SafetensorsReader(path).Read("t");
  EXPECT_EQ(t.scalar_type(), torch::kInt32);
  EXPECT_EQ(t[1].item<int32_t>(), 40000);
  EXPECT_EQ(t[2].item<int32_t>(), 65535);
}

TEST_F(SafetensorsTest, EmptyFileOfTensors) {
  const std::string path = (dir_ / "none.safetensors").string();
  WriteSafetensors(path, {});
  EXPECT_TRUE(ReadSafetensors(path).tensors.empty());
}

TEST_F(SafetensorsTest, WriterRejectsBadInputsAndKeepsTheTarget) {
  const std::string path = (dir_ / "x.safetensors").string();
  EXPECT_THROW(WriteSafetensors(path, {{"__metadata__", torch::zeros({1})}}), std::invalid_argument);
  EXPECT_THROW(WriteSafetensors(path, {{"c", torch::zeros({1}, torch::kComplexFloat)}}), std::invalid_argument);
  EXPECT_FALSE(std::filesystem::exists(path));
  EXPECT_THROW(WriteSafetensors((dir_ / "no_such_dir" / "x.safetensors").string(), {{"a", torch::zeros({1})}}),
               UserError);
  // A write error names the file for what it is (final weights are not a checkpoint shard).
  try {
    WriteSafetensors((dir_ / "no_such_dir" / "final.safetensors").string(), {{"a", torch::zeros({1})}}, {},
                     "final weights");
    ADD_FAILURE() << "expected a UserError";
  } catch (const UserError& e) {
    EXPECT_NE(std::string(e.what()).find("final weights"), std::string::npos) << e.what();
    EXPECT_EQ(std::string(e.what()).find("checkpoint shard"), std::string::npos) << e.what();
  }
}

TEST_F(SafetensorsTest, HostileHeadersAreOneLineErrors) {
  const std::string f32x2(8, '\0');
  struct Case {
    const char* name;
    std::string header;
    std::string data;
    const char* expect;
  };
  const Case cases[] = {
      {"json", "{not json", "", "not valid JSON"},
      {"array", "[1,2]", "", "not a JSON object"},
      {"dup", R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]}})",
       f32x2, "duplicate key 'a'"},
      {"dupfield", R"({"a":{"dtype":"F32","dtype":"F32","shape":[2],"data_offsets":[0,8]}})", f32x2, "duplicate key"},
      {"range", R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,800]}})", f32x2, "ends at byte 800"},
      {"span", R"({"a":{"dtype":"F32","shape":[3],"data_offsets":[0,8]}})", f32x2, "needs 12"},
      {"overlap",
       R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},"b":{"dtype":"F32","shape":[1],"data_offsets":[4,8]}})",
       f32x2, "overlaps"},
      {"gap", R"({"a":{"dtype":"F32","shape":[1],"data_offsets":[4,8]}})", f32x2, "gap of 4 bytes"},
      {"tail", R"({"a":{"dtype":"F32","shape":[1],"data_offsets":[0,4]}})", f32x2, "4 bytes after the last tensor"},
      {"backwards", R"({"a":{"dtype":"F32","shape":[0],"data_offsets":[8,0]}})", f32x2, "ends before it begins"},
      {"dtype", R"({"a":{"dtype":"F8_E9","shape":[2],"data_offsets":[0,8]}})", f32x2, "unsupported dtype 'F8_E9'"},
      {"negative", R"({"a":{"dtype":"F32","shape":[-2],"data_offsets":[0,8]}})", f32x2, "non-negative"},
      {"fraction", R"({"a":{"dtype":"F32","shape":[2.0],"data_offsets":[0,8]}})", f32x2, "non-negative"},
      {"huge", R"({"a":{"dtype":"F32","shape":[4611686018427387904,8],"data_offsets":[0,8]}})", f32x2, "too large"},
      {"offsets", R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0]}})", f32x2, "data_offsets"},
      {"nodtype", R"({"a":{"shape":[2],"data_offsets":[0,8]}})", f32x2, "no dtype"},
      {"field", R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8],"x":1}})", f32x2, "unknown field 'x'"},
      {"metadata", R"({"__metadata__":{"step":12}})", "", "not a string"},
      {"utf8", "{\"\xff\":1}", "", "not valid JSON"},
  };
  for (const Case& c : cases) {
    const std::string message = OpenError(WriteHeader(c.name, c.header, c.data));
    EXPECT_NE(message.find(c.expect), std::string::npos) << c.name << ": " << message;
  }
  EXPECT_NE(OpenError(WriteRaw("big", 200'000'000, "{}", "")).find("100 MB"), std::string::npos);
  EXPECT_NE(OpenError(WriteRaw("past", 64, "{}", "")).find("past the end"), std::string::npos);
  const std::string short_path = (dir_ / "short").string();
  std::ofstream(short_path, std::ios::binary) << "abc";
  EXPECT_NE(OpenError(short_path).find("too short"), std::string::npos);
  EXPECT_NE(OpenError((dir_ / "absent").string()).find("cannot open"), std::string::npos);
}

TEST_F(SafetensorsTest, HeaderWhoseElementCountPassesInt64IsRefusedWhateverTheDataSize) {
  // 2 x (2^63 - 1) one-byte elements: the byte count fits uint64 and a data
  // section that large would hold it, but LibTorch's sizes are int64 (found
  // by tests/fuzz/fuzz_safetensors_header, which calls the parser with any
  // data size; a real file is never that large).
  const uint64_t bytes = 18446744073709551614ull;
  const std::string header = R"({"a":{"dtype":"U8","shape":[9223372036854775807,2],"data_offsets":[0,)" +
                             std::to_string(bytes) + "]}}";
  try {
    ParseSafetensorsHeader(header, bytes, "x");
    ADD_FAILURE() << "expected a UserError";
  } catch (const UserError& e) {
    EXPECT_NE(std::string(e.what()).find("shape is too large"), std::string::npos) << e.what();
  }
  // A dimension past int64 is refused even when another is 0 (no bytes).
  EXPECT_THROW(ParseSafetensorsHeader(R"({"a":{"dtype":"U8","shape":[0,9223372036854775808],"data_offsets":[0,0]}})", 0,
                                      "x"),
               UserError);
}

TEST_F(SafetensorsTest, ShardedIndexMapsTensorsToShardFiles) {
  WriteSafetensors((dir_ / "model-00001-of-00002.safetensors").string(), {{"a", torch::zeros({1})}});
  WriteSafetensors((dir_ / "model-00002-of-00002.safetensors").string(), {{"b", torch::ones({1})}});
  const std::string index = (dir_ / "model.safetensors.index.json").string();
  std::ofstream(index) << R"({"metadata":{"total_size":8},"weight_map":{"a":"model-00001-of-00002.safetensors",)"
                          R"("b":"model-00002-of-00002.safetensors"}})";
  const auto shards = ReadSafetensorsIndex(index);
  ASSERT_EQ(shards.size(), 2u);
  EXPECT_EQ(SafetensorsReader(shards.at("b")).Read("b").item<float>(), 1.0f);

  std::ofstream(index) << R"({"weight_map":{"c":"model-00003-of-00003.safetensors"}})";
  EXPECT_THROW(ReadSafetensorsIndex(index), UserError);
  std::ofstream(index) << R"({"metadata":{}})";
  EXPECT_THROW(ReadSafetensorsIndex(index), UserError);
}

}  // namespace
}  // namespace llmplan::checkpoint
