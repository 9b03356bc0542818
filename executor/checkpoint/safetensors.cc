// safetensors writer and validating reader (format in safetensors.h).
#include "executor/checkpoint/safetensors.h"

#include <ATen/ATen.h>

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <bit>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <stdexcept>

#include <nlohmann/json.hpp>

#include "base/atomic_file.h"
#include "executor/checkpoint/crc32c.h"
#include "base/user_error.h"

namespace llmplan::checkpoint {

// The format is little-endian; we write and read tensor memory as is.
static_assert(std::endian::native == std::endian::little, "safetensors I/O assumes a little-endian host");

namespace {

using nlohmann::json;

struct DtypeInfo {
  const char* name;
  int file_bytes;             // bytes per element in the file
  at::ScalarType torch_type;  // what the reader returns
};

// U16/U32 come last: the writer's lookup by torch dtype must find the
// one-to-one types first, and the reader widens these two. The names and
// sizes are those SafetensorsDtypeBytes accepts (safetensors_header.cc), so
// every entry a validated header holds is found here.
constexpr DtypeInfo kDtypes[] = {
    {"F64", 8, at::kDouble}, {"F32", 4, at::kFloat}, {"F16", 2, at::kHalf},
    {"BF16", 2, at::kBFloat16}, {"I64", 8, at::kLong}, {"I32", 4, at::kInt},
    {"I16", 2, at::kShort},   {"I8", 1, at::kChar},     {"U8", 1, at::kByte},
    {"BOOL", 1, at::kBool},   {"U16", 2, at::kInt},   {"U32", 4, at::kLong},
};

const DtypeInfo* DtypeByName(const std::string& name) {
  for (const DtypeInfo& d : kDtypes) {
    if (name == d.name) return &d;
  }
  return nullptr;
}

const DtypeInfo* DtypeByTorch(at::ScalarType type) {
  for (const DtypeInfo& d : kDtypes) {
    if (d.torch_type == type && d.file_bytes == static_cast<int>(c10::elementSize(type))) return &d;
  }
  return nullptr;
}

std::string Errno() { return std::strerror(errno); }

}  // namespace

// ---------------------------------------------------------------------------
// Writer

FileDigest WriteSafetensors(const std::string& path, const std::map<std::string, at::Tensor>& tensors,
                            const std::map<std::string, std::string>& metadata, const std::string& what) {
  json header = json::object();  // std::map underneath: keys come out sorted
  std::vector<at::Tensor> ordered;
  uint64_t offset = 0;
  for (const auto& [name, tensor] : tensors) {  // std::map: ordered by name
    if (name.empty() || name == "__metadata__") {
      throw std::invalid_argument("safetensors: invalid tensor name '" + name + "'");
    }
    if (!tensor.defined() || tensor.device().type() != at::kCPU) {
      throw std::invalid_argument("safetensors: tensor '" + name + "' must be a defined CPU tensor");
    }
    const DtypeInfo* dtype = DtypeByTorch(tensor.scalar_type());
    if (dtype == nullptr) {
      throw std::invalid_argument("safetensors: tensor '" + name + "' has unsupported dtype " +
                                  std::string(c10::toString(tensor.scalar_type())));
    }
    at::Tensor contiguous = tensor.contiguous();
    const uint64_t bytes = static_cast<uint64_t>(contiguous.numel()) * dtype->file_bytes;
    header[name] = {{"dtype", dtype->name}, {"shape", contiguous.sizes().vec()}, {"data_offsets", {offset, offset + bytes}}};
    offset += bytes;
    ordered.push_back(std::move(contiguous));
  }
  if (!metadata.empty()) header["__metadata__"] = metadata;

  std::string text = header.dump();
  // Pad so the data section starts 8-byte aligned (as the reference writer
  // does): readers can then map tensors in place.
  text.append((8 - text.size() % 8) % 8, ' ');
  const uint64_t header_len = text.size();

  // The checksum is taken over the bytes as they are written, while they are
  // in cache: no second pass over a multi-gigabyte file.
  AtomicFile file(path, what);
  FileDigest digest;
  auto write = [&](const void* data, size_t bytes) {
    digest.crc32c = Crc32cExtend(digest.crc32c, data, bytes);
    digest.bytes += bytes;
    file.Write(data, bytes);
  };
  write(&header_len, 8);
  write(text.data(), text.size());
  for (const at::Tensor& t : ordered) write(t.data_ptr(), t.nbytes());
  file.Commit();
  return digest;
}

// ---------------------------------------------------------------------------
// Reader

SafetensorsReader::SafetensorsReader(const std::string& path) : path_(path) {
  fd_ = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd_ < 0) throw UserError(path + ": cannot open safetensors file (" + Errno() + ")");
  struct stat st;
  if (::fstat(fd_, &st) != 0 || !S_ISREG(st.st_mode)) {
    ::close(fd_);
    throw UserError(path + ": not a regular file");
  }
  file_bytes_ = static_cast<uint64_t>(st.st_size);
  if (file_bytes_ < 8) {
    ::close(fd_);
    throw UserError(path + ": " + std::to_string(file_bytes_) +
                    " bytes is too short for a safetensors file (truncated?)");
  }
  void* map = ::mmap(nullptr, file_bytes_, PROT_READ, MAP_SHARED, fd_, 0);
  if (map == MAP_FAILED) {
    const std::string why = Errno();
    ::close(fd_);
    throw UserError(path + ": cannot mmap (" + why + ")");
  }
  map_ = static_cast<const unsigned char*>(map);
  try {
    SafetensorsLayout layout = ParseSafetensorsFile(map_, file_bytes_, path, &metadata_);
    data_offset_ = layout.data_offset;
    for (SafetensorsEntry& e : layout.entries) {
      std::string name = e.name;
      entries_.emplace(std::move(name), std::move(e));
    }
  } catch (...) {
    ::munmap(const_cast<unsigned char*>(map_), file_bytes_);
    ::close(fd_);
    throw;
  }
}

SafetensorsReader::~SafetensorsReader() {
  ::munmap(const_cast<unsigned char*>(map_), file_bytes_);
  ::close(fd_);
}

at::Tensor SafetensorsReader::Read(const std::string& name) const {
  auto it = entries_.find(name);
  if (it == entries_.end()) throw UserError(path_ + ": no tensor named '" + name + "'");
  const SafetensorsEntry& e = it->second;
  const DtypeInfo* dtype = DtypeByName(e.dtype);  // validated on open
  at::Tensor out = at::empty(e.shape, at::TensorOptions().dtype(dtype->torch_type));
  const unsigned char* src = map_ + data_offset_ + e.begin;
  const int64_t n = out.numel();
  if (e.dtype == "U16") {
    int32_t* dst = out.data_ptr<int32_t>();
    for (int64_t i = 0; i < n; ++i) {
      uint16_t v;
      std::memcpy(&v, src + 2 * i, 2);
      dst[i] = v;
    }
  } else if (e.dtype == "U32") {
    int64_t* dst = out.data_ptr<int64_t>();
    for (int64_t i = 0; i < n; ++i) {
      uint32_t v;
      std::memcpy(&v, src + 4 * i, 4);
      dst[i] = v;
    }
  } else if (n > 0) {
    std::memcpy(out.data_ptr(), src, e.end - e.begin);
  }
  return out;
}

at::Tensor SafetensorsReader::ReadRange(const std::string& name, int64_t first, int64_t count) const {
  auto it = entries_.find(name);
  if (it == entries_.end()) throw UserError(path_ + ": no tensor named '" + name + "'");
  const SafetensorsEntry& e = it->second;
  const DtypeInfo* dtype = DtypeByName(e.dtype);
  if (e.shape.size() != 1 || dtype->torch_type != at::kFloat || e.dtype != "F32")
    throw UserError(path_ + ": tensor '" + name + "' is not a 1-D F32 tensor");
  if (first < 0 || count < 0 || first + count > e.shape[0])
    throw UserError(path_ + ": elements [" + std::to_string(first) + ", " + std::to_string(first + count) +
                    ") of '" + name + "' are out of its range [0, " + std::to_string(e.shape[0]) + ")");
  at::Tensor out = at::empty({count}, at::TensorOptions().dtype(at::kFloat));
  if (count > 0) std::memcpy(out.data_ptr(), map_ + data_offset_ + e.begin + 4 * first, 4 * count);
  return out;
}

SafetensorsContents ReadSafetensors(const std::string& path) {
  SafetensorsReader reader(path);
  SafetensorsContents contents;
  contents.metadata = reader.metadata();
  for (const auto& [name, entry] : reader.entries()) contents.tensors.emplace(name, reader.Read(name));
  return contents;
}

std::map<std::string, std::string> ReadSafetensorsIndex(const std::string& index_path) {
  std::ifstream in(index_path);
  if (!in) throw UserError(index_path + ": cannot open safetensors index (" + Errno() + ")");
  json index;
  try {
    index = json::parse(in);
  } catch (const json::exception& e) {
    throw UserError(index_path + ": not valid JSON (" + std::string(e.what()) + ")");
  }
  if (!index.is_object() || !index.contains("weight_map") || !index["weight_map"].is_object()) {
    throw UserError(index_path + ": no \"weight_map\" object: not a safetensors index");
  }
  const std::filesystem::path dir = std::filesystem::path(index_path).parent_path();
  std::map<std::string, std::string> shards;
  for (auto it = index["weight_map"].begin(); it != index["weight_map"].end(); ++it) {
    if (!it.value().is_string()) throw UserError(index_path + ": weight_map entry '" + it.key() + "' is not a file name");
    const std::string shard = (dir / it.value().get<std::string>()).string();
    if (!std::filesystem::exists(shard)) {
      throw UserError(index_path + ": shard " + shard + " (holding '" + it.key() + "') is missing");
    }
    shards[it.key()] = shard;
  }
  return shards;
}

}  // namespace llmplan::checkpoint
