#include "model/safetensors.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <set>
#include <sstream>

#include "base/error.h"

namespace deepinfer {

namespace fs = std::filesystem;
using Json = nlohmann::json;

namespace {

std::string ShapeToString(const std::vector<int64_t>& shape) {
  std::string s = "[";
  for (size_t i = 0; i < shape.size(); ++i) s += (i ? ", " : "") + std::to_string(shape[i]);
  return s + "]";
}

TensorEntry ParseEntry(const std::string& path, const std::string& name, const Json& info,
                       const uint8_t* data_start, uint64_t data_size) {
  if (!info.is_object()) DI_THROW("{}: header entry for tensor '{}' is not an object", path, name);
  TensorEntry e;
  e.name = name;
  e.file = path;
  auto dtype_it = info.find("dtype");
  if (dtype_it == info.end() || !dtype_it->is_string()) {
    DI_THROW("{}: tensor '{}' has no dtype", path, name);
  }
  const auto dtype = ParseSafetensorsDType(dtype_it->get<std::string>());
  if (!dtype) DI_THROW("{}: tensor '{}' has unsupported dtype '{}'", path, name, dtype_it->get<std::string>());
  e.dtype = *dtype;
  auto shape_it = info.find("shape");
  if (shape_it == info.end() || !shape_it->is_array()) DI_THROW("{}: tensor '{}' has no shape", path, name);
  uint64_t numel = 1;
  for (const Json& d : *shape_it) {
    if (!d.is_number_integer() || d.get<int64_t>() < 0) {
      DI_THROW("{}: tensor '{}' has an invalid shape {}", path, name, shape_it->dump());
    }
    e.shape.push_back(d.get<int64_t>());
    numel *= static_cast<uint64_t>(d.get<int64_t>());
  }
  if (e.shape.size() > static_cast<size_t>(kMaxDims)) {
    DI_THROW("{}: tensor '{}' has {} dimensions (at most {})", path, name, e.shape.size(), kMaxDims);
  }
  auto off_it = info.find("data_offsets");
  if (off_it == info.end() || !off_it->is_array() || off_it->size() != 2 ||
      !(*off_it)[0].is_number_unsigned() || !(*off_it)[1].is_number_unsigned()) {
    DI_THROW("{}: tensor '{}' has invalid data_offsets", path, name);
  }
  const uint64_t begin = (*off_it)[0].get<uint64_t>();
  const uint64_t end = (*off_it)[1].get<uint64_t>();
  if (end < begin) DI_THROW("{}: tensor '{}' has data_offsets end < begin", path, name);
  const uint64_t expected = numel * DTypeSize(e.dtype);
  if (end - begin != expected) {
    DI_THROW("{}: tensor '{}' ({} {}) should hold {} bytes but its data_offsets span {}", path,
             name, DTypeName(e.dtype), ShapeToString(e.shape), expected, end - begin);
  }
  if (end > data_size) {
    DI_THROW("{}: tensor '{}' data [{}, {}) lies beyond the end of the file ({} data bytes): the "
             "file is truncated",
             path, name, begin, end, data_size);
  }
  e.data = data_start + begin;
  e.nbytes = expected;
  return e;
}

}  // namespace

TensorView TensorEntry::View() const {
  return TensorView(const_cast<void*>(data), dtype, shape.data(), static_cast<int>(shape.size()));
}

std::string TensorEntry::ShapeString() const { return ShapeToString(shape); }

std::unique_ptr<SafetensorsFile> SafetensorsFile::Open(const std::string& path) {
  std::unique_ptr<SafetensorsFile> f(new SafetensorsFile());
  f->path_ = path;
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) DI_THROW("cannot open '{}': {}", path, std::strerror(errno));
  struct stat st {};
  if (::fstat(fd, &st) != 0) {
    ::close(fd);
    DI_THROW("cannot stat '{}': {}", path, std::strerror(errno));
  }
  const size_t size = static_cast<size_t>(st.st_size);
  if (size < 8) {
    ::close(fd);
    DI_THROW("{}: file is {} bytes, too short for a safetensors header: the file is truncated",
             path, size);
  }
  void* map = ::mmap(nullptr, size, PROT_READ, MAP_PRIVATE, fd, 0);
  ::close(fd);
  if (map == MAP_FAILED) DI_THROW("cannot mmap '{}': {}", path, std::strerror(errno));
  f->map_ = map;
  f->map_size_ = size;

  const auto* bytes = static_cast<const uint8_t*>(map);
  uint64_t header_len = 0;
  std::memcpy(&header_len, bytes, 8);
  if (header_len > size - 8) {
    DI_THROW("{}: header length {} exceeds the file size {}: the file is truncated or not "
             "safetensors",
             path, header_len, size);
  }
  Json header;
  try {
    header = Json::parse(bytes + 8, bytes + 8 + header_len);
  } catch (const Json::parse_error& e) {
    DI_THROW("{}: header is not valid JSON: {}", path, e.what());
  }
  if (!header.is_object()) DI_THROW("{}: header is not a JSON object", path);
  const uint8_t* data_start = bytes + 8 + header_len;
  const uint64_t data_size = size - 8 - header_len;
  for (auto it = header.begin(); it != header.end(); ++it) {
    if (it.key() == "__metadata__") {
      if (it->is_object()) {
        for (auto m = it->begin(); m != it->end(); ++m) {
          if (m->is_string()) f->metadata_[m.key()] = m->get<std::string>();
        }
      }
      continue;
    }
    f->tensors_.push_back(ParseEntry(path, it.key(), *it, data_start, data_size));
  }
  return f;
}

SafetensorsFile::~SafetensorsFile() {
  if (map_ != nullptr) ::munmap(map_, map_size_);
}

std::unique_ptr<Checkpoint> Checkpoint::Open(const std::string& model_dir) {
  auto ckpt = std::make_unique<Checkpoint>();
  ckpt->dir_ = model_dir;
  if (!fs::is_directory(model_dir)) DI_THROW("model directory '{}' does not exist", model_dir);
  std::vector<std::string> files;
  const fs::path index = fs::path(model_dir) / "model.safetensors.index.json";
  const fs::path single = fs::path(model_dir) / "model.safetensors";
  std::map<std::string, std::string> expected_file;  // from the index
  if (fs::exists(index)) {
    std::ifstream in(index);
    Json j;
    try {
      j = Json::parse(in);
    } catch (const Json::parse_error& e) {
      DI_THROW("{}: not valid JSON: {}", index.string(), e.what());
    }
    if (!j.contains("weight_map") || !j["weight_map"].is_object()) {
      DI_THROW("{}: missing key 'weight_map'", index.string());
    }
    std::set<std::string> shards;
    for (auto it = j["weight_map"].begin(); it != j["weight_map"].end(); ++it) {
      if (!it->is_string()) DI_THROW("{}: weight_map['{}'] is not a file name", index.string(), it.key());
      const std::string shard = (fs::path(model_dir) / it->get<std::string>()).string();
      expected_file[it.key()] = shard;
      shards.insert(shard);
    }
    files.assign(shards.begin(), shards.end());
  } else if (fs::exists(single)) {
    files.push_back(single.string());
  } else {
    for (const auto& entry : fs::directory_iterator(model_dir)) {
      if (entry.path().extension() == ".safetensors") files.push_back(entry.path().string());
    }
    std::sort(files.begin(), files.end());
  }
  if (files.empty()) DI_THROW("{}: no *.safetensors files found", model_dir);
  for (const std::string& file : files) {
    if (!fs::exists(file)) DI_THROW("{}: shard '{}' listed in the index does not exist", model_dir, file);
    ckpt->files_.push_back(SafetensorsFile::Open(file));
    for (const TensorEntry& e : ckpt->files_.back()->tensors()) {
      auto [it, inserted] = ckpt->by_name_.emplace(e.name, &e);
      if (!inserted) DI_THROW("{}: tensor '{}' appears in both '{}' and '{}'", model_dir, e.name, it->second->file, e.file);
    }
  }
  for (const auto& [name, file] : expected_file) {
    const TensorEntry* e = ckpt->Find(name);
    if (e == nullptr) DI_THROW("{}: tensor '{}' is listed in the index but missing from '{}'", model_dir, name, file);
    if (e->file != file) DI_THROW("{}: tensor '{}' is in '{}' but the index says '{}'", model_dir, name, e->file, file);
  }
  return ckpt;
}

const TensorEntry* Checkpoint::Find(const std::string& name) const {
  auto it = by_name_.find(name);
  return it == by_name_.end() ? nullptr : it->second;
}

const TensorEntry& Checkpoint::Get(const std::string& name) const {
  const TensorEntry* e = Find(name);
  if (e == nullptr) DI_THROW("{}: missing tensor '{}'", dir_, name);
  return *e;
}

std::vector<std::string> Checkpoint::Names() const {
  std::vector<std::string> names;
  for (const auto& [n, _] : by_name_) names.push_back(n);
  return names;
}

size_t Checkpoint::total_bytes() const {
  size_t total = 0;
  for (const auto& [_, e] : by_name_) total += e->nbytes;
  return total;
}

void WriteSafetensors(const std::string& path, const std::vector<TensorToWrite>& tensors) {
  Json header = Json::object();
  uint64_t offset = 0;
  for (const TensorToWrite& t : tensors) {
    header[t.name] = {{"dtype", std::string(DTypeName(t.dtype))},
                      {"shape", t.shape},
                      {"data_offsets", {offset, offset + t.bytes.size()}}};
    offset += t.bytes.size();
  }
  std::string h = header.dump();
  while ((h.size() + 8) % 8 != 0) h.push_back(' ');
  std::ofstream out(path, std::ios::binary);
  if (!out) DI_THROW("cannot write '{}'", path);
  const uint64_t len = h.size();
  out.write(reinterpret_cast<const char*>(&len), 8);
  out.write(h.data(), static_cast<std::streamsize>(h.size()));
  for (const TensorToWrite& t : tensors) {
    out.write(reinterpret_cast<const char*>(t.bytes.data()), static_cast<std::streamsize>(t.bytes.size()));
  }
  if (!out) DI_THROW("error writing '{}'", path);
}

}  // namespace deepinfer
