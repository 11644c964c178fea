// Safetensors checkpoints, memory-mapped read-only.
//
// File format: u64 little-endian header length N, N bytes of JSON {name: {dtype, shape,
// data_offsets: [begin, end)}, "__metadata__": {...}}, then the data; offsets are relative to
// byte 8 + N. Every tensor's extent and size is validated against the file at open time, so a
// truncated or corrupt file fails with an error naming the file and the tensor.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "tensor/tensor_view.h"

namespace deepinfer {

struct TensorEntry {
  std::string name;
  std::string file;  // path of the file holding it
  DType dtype = DType::kF32;
  std::vector<int64_t> shape;
  const void* data = nullptr;  // into the mapping
  size_t nbytes = 0;

  TensorView View() const;
  std::string ShapeString() const;
};

class SafetensorsFile {
 public:
  // Maps and validates `path`; throws deepinfer::Error on any problem.
  static std::unique_ptr<SafetensorsFile> Open(const std::string& path);
  ~SafetensorsFile();
  SafetensorsFile(const SafetensorsFile&) = delete;
  SafetensorsFile& operator=(const SafetensorsFile&) = delete;

  const std::string& path() const { return path_; }
  const std::vector<TensorEntry>& tensors() const { return tensors_; }
  const std::map<std::string, std::string>& metadata() const { return metadata_; }

 private:
  SafetensorsFile() = default;
  std::string path_;
  void* map_ = nullptr;
  size_t map_size_ = 0;
  std::vector<TensorEntry> tensors_;
  std::map<std::string, std::string> metadata_;
};

// All tensors of a model directory: `model.safetensors`, or the shards listed by
// `model.safetensors.index.json`, or else every `*.safetensors` file in the directory.
class Checkpoint {
 public:
  static std::unique_ptr<Checkpoint> Open(const std::string& model_dir);

  const std::string& dir() const { return dir_; }
  // nullptr when absent.
  const TensorEntry* Find(const std::string& name) const;
  // Throws "<dir>: missing tensor '<name>'" when absent.
  const TensorEntry& Get(const std::string& name) const;
  size_t num_tensors() const { return by_name_.size(); }
  std::vector<std::string> Names() const;
  size_t total_bytes() const;

 private:
  std::string dir_;
  std::vector<std::unique_ptr<SafetensorsFile>> files_;
  std::map<std::string, const TensorEntry*> by_name_;
};

// Writes `tensors` to a new safetensors file (used by tests and tools that build checkpoints).
struct TensorToWrite {
  std::string name;
  DType dtype;
  std::vector<int64_t> shape;
  std::vector<uint8_t> bytes;
};
void WriteSafetensors(const std::string& path, const std::vector<TensorToWrite>& tensors);

}  // namespace deepinfer
