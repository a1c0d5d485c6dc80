// GGUF parsing (GGUF_NOTES.md §1). The parser walks the header with a cursor that checks every
// read against the end of the file; counts read from the file are checked against the bytes
// that remain before anything is allocated for them, so an absurd count fails fast instead of
// exhausting memory.
#include "model/gguf.hpp"

#include "model/enum_names.hpp"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <limits>

#include <fmt/format.h>

namespace troupe::model {

// ---------------------------------------------------------------------------------------------
// Memory mapping

// Either an mmap of the file (open) or an owned copy of an in-memory image (from_bytes).
struct GgufFile::Mapping {
  const std::byte* base = nullptr;
  size_t size = 0;
  std::vector<std::byte> copy;  // from_bytes only; `base` then points into it

  Mapping(const Mapping&) = delete;
  Mapping& operator=(const Mapping&) = delete;
  Mapping(const std::byte* b, size_t s) : base(b), size(s) {}
  explicit Mapping(std::span<const std::byte> bytes)
      : copy(bytes.begin(), bytes.end()) {
    base = copy.data();
    size = copy.size();
  }
  ~Mapping() {
    if (base != nullptr && copy.empty()) ::munmap(const_cast<std::byte*>(base), size);
  }
};

namespace {

constexpr uint32_t kMagic = 0x46554747;  // "GGUF" read as a little-endian u32
constexpr uint32_t kMaxDims = 4;
constexpr uint64_t kMaxKeyBytes = 65535;
constexpr uint64_t kMaxTensorNameBytes = 64;

// Smallest encoding of one value of each type; bounds the element count an array may claim.
uint64_t min_encoded_bytes(GgufValueType type) {
  switch (type) {
    case GgufValueType::kUint8:
    case GgufValueType::kInt8:
    case GgufValueType::kBool: return 1;
    case GgufValueType::kUint16:
    case GgufValueType::kInt16: return 2;
    case GgufValueType::kUint32:
    case GgufValueType::kInt32:
    case GgufValueType::kFloat32: return 4;
    case GgufValueType::kUint64:
    case GgufValueType::kInt64:
    case GgufValueType::kFloat64:
    case GgufValueType::kString: return 8;  // a string is at least its u64 length
    case GgufValueType::kArray: return 12;  // element type + count
  }
  return 1;
}

bool is_known_value_type(uint32_t raw) { return raw <= static_cast<uint32_t>(GgufValueType::kFloat64); }

template <typename T>
T load(const std::byte* p) {
  T value;
  std::memcpy(&value, p, sizeof(T));  // file data is only byte-aligned
  return value;
}

}  // namespace

constexpr EnumNames<GgufValueType, 13> kGgufValueTypeNames{{{
    {GgufValueType::kUint8, "uint8"}, {GgufValueType::kInt8, "int8"},
    {GgufValueType::kUint16, "uint16"}, {GgufValueType::kInt16, "int16"},
    {GgufValueType::kUint32, "uint32"}, {GgufValueType::kInt32, "int32"},
    {GgufValueType::kFloat32, "float32"}, {GgufValueType::kBool, "bool"},
    {GgufValueType::kString, "string"}, {GgufValueType::kArray, "array"},
    {GgufValueType::kUint64, "uint64"}, {GgufValueType::kInt64, "int64"},
    {GgufValueType::kFloat64, "float64"}}}, "?"};
static_assert(kGgufValueTypeNames.dense());

std::string_view to_string(GgufValueType type) { return kGgufValueTypeNames.name(type); }

// ---------------------------------------------------------------------------------------------
// Parser

class GgufParser {
 public:
  GgufParser(GgufFile& file, const std::byte* base, uint64_t size)
      : file_(file), base_(base), size_(size) {}

  void parse() {
    const uint32_t magic = read<uint32_t>("magic");
    if (magic != kMagic) fail("magic", "not a GGUF file (the first 4 bytes are not 'GGUF')");
    file_.version_ = read<uint32_t>("version");
    if (file_.version_ == 1) fail("version", "GGUF v1 is not supported (only v2 and v3)");
    if (file_.version_ != 2 && file_.version_ != 3) {
      fail("version", fmt::format("unsupported GGUF version {}", file_.version_));
    }
    const uint64_t num_tensors = read<uint64_t>("tensor_count");
    const uint64_t num_kv = read<uint64_t>("metadata_kv_count");
    // A key-value pair needs at least a key length (8) and a value type (4); a tensor info at
    // least a name length, n_dims, type and offset (24).
    check_count(num_kv, 12, "metadata_kv_count");
    check_count(num_tensors, 24, "tensor_count");

    for (uint64_t i = 0; i < num_kv; ++i) read_key_value(i);
    read_alignment();
    for (uint64_t i = 0; i < num_tensors; ++i) read_tensor_info(i);
    place_tensor_data();
  }

 private:
  [[noreturn]] void fail(std::string_view field, std::string_view why) const {
    throw GgufError(fmt::format("{}: invalid GGUF at byte {} ({}): {}", file_.path_.string(),
                                cursor_, field, why));
  }

  void need(uint64_t bytes, std::string_view field) const {
    if (bytes > size_ - cursor_) {
      fail(field, fmt::format("file truncated: needs {} more bytes, {} remain", bytes,
                              size_ - cursor_));
    }
  }

  void check_count(uint64_t count, uint64_t min_bytes_each, std::string_view field) const {
    if (count > (size_ - cursor_) / min_bytes_each) {
      fail(field, fmt::format("count {} cannot fit in the {} bytes that remain", count,
                              size_ - cursor_));
    }
  }

  template <typename T>
  T read(std::string_view field) {
    need(sizeof(T), field);
    T value = load<T>(base_ + cursor_);
    cursor_ += sizeof(T);
    return value;
  }

  std::string_view read_string(std::string_view field, uint64_t max_bytes) {
    const uint64_t length = read<uint64_t>(field);
    if (length > max_bytes) {
      fail(field, fmt::format("string length {} exceeds the limit of {}", length, max_bytes));
    }
    need(length, field);
    std::string_view text(reinterpret_cast<const char*>(base_ + cursor_), length);
    cursor_ += length;
    return text;
  }

  GgufValueType read_value_type(std::string_view field) {
    const uint32_t raw = read<uint32_t>(field);
    if (!is_known_value_type(raw)) fail(field, fmt::format("unknown value type {}", raw));
    return static_cast<GgufValueType>(raw);
  }

  void read_scalar(GgufValue& value, std::string_view field) {
    switch (value.type_) {
      case GgufValueType::kUint8: value.scalar_.u = read<uint8_t>(field); return;
      case GgufValueType::kInt8: value.scalar_.i = read<int8_t>(field); return;
      case GgufValueType::kUint16: value.scalar_.u = read<uint16_t>(field); return;
      case GgufValueType::kInt16: value.scalar_.i = read<int16_t>(field); return;
      case GgufValueType::kUint32: value.scalar_.u = read<uint32_t>(field); return;
      case GgufValueType::kInt32: value.scalar_.i = read<int32_t>(field); return;
      case GgufValueType::kUint64: value.scalar_.u = read<uint64_t>(field); return;
      case GgufValueType::kInt64: value.scalar_.i = read<int64_t>(field); return;
      case GgufValueType::kFloat32: value.scalar_.f = read<float>(field); return;
      case GgufValueType::kFloat64: value.scalar_.f = read<double>(field); return;
      case GgufValueType::kBool: {
        const uint8_t b = read<uint8_t>(field);
        if (b > 1) fail(field, fmt::format("bool value {} is neither 0 nor 1", b));
        value.scalar_.u = b;
        return;
      }
      case GgufValueType::kString: {
        const std::string_view text = read_string(field, size_);
        value.data_ = reinterpret_cast<const std::byte*>(text.data());
        value.count_ = text.size();
        return;
      }
      case GgufValueType::kArray: fail(field, "internal: array read as a scalar");
    }
  }

  void read_array(GgufValue& value, std::string_view field) {
    value.element_type_ = read_value_type(field);
    if (value.element_type_ == GgufValueType::kArray) fail(field, "nested arrays are not supported");
    value.count_ = read<uint64_t>(field);
    check_count(value.count_, min_encoded_bytes(value.element_type_), field);
    value.data_ = base_ + cursor_;
    if (value.element_type_ == GgufValueType::kString) {
      for (uint64_t i = 0; i < value.count_; ++i) read_string(field, size_);
    } else {
      const uint64_t bytes = value.count_ * min_encoded_bytes(value.element_type_);
      need(bytes, field);
      if (value.element_type_ == GgufValueType::kBool) {
        for (uint64_t i = 0; i < value.count_; ++i) {
          if (load<uint8_t>(base_ + cursor_ + i) > 1) fail(field, "bool array element is not 0 or 1");
        }
      }
      cursor_ += bytes;
    }
  }

  void read_key_value(uint64_t index) {
    const std::string key_field = fmt::format("metadata[{}].key", index);
    const std::string_view key = read_string(key_field, kMaxKeyBytes);
    if (key.empty()) fail(key_field, "empty key");
    GgufValue value;
    value.type_ = read_value_type(fmt::format("metadata '{}' value type", key));
    const std::string field = fmt::format("metadata '{}'", key);
    if (value.is_array()) {
      read_array(value, field);
    } else {
      read_scalar(value, field);
    }
    if (!file_.metadata_.emplace(std::string(key), value).second) {
      fail(field, "duplicate key");
    }
  }

  void read_alignment() {
    const GgufValue* alignment = file_.find("general.alignment");
    if (alignment == nullptr) return;
    const auto a = alignment->as_uint();
    if (!a || *a == 0 || (*a & (*a - 1)) != 0 || *a > (1u << 20)) {
      fail("general.alignment", "must be a power of two integer");
    }
    file_.alignment_ = *a;
  }

  void read_tensor_info(uint64_t index) {
    GgufTensorInfo info;
    const std::string field = fmt::format("tensor_info[{}]", index);
    info.name = std::string(read_string(field + ".name", kMaxTensorNameBytes));
    const std::string named = fmt::format("tensor '{}'", info.name);
    info.num_dims = read<uint32_t>(named + " n_dims");
    if (info.num_dims == 0 || info.num_dims > kMaxDims) {
      fail(named, fmt::format("n_dims {} is outside 1..{}", info.num_dims, kMaxDims));
    }
    info.num_elements = 1;
    for (uint32_t d = 0; d < info.num_dims; ++d) {
      const uint64_t dim = read<uint64_t>(named + " dims");
      if (dim == 0 || dim > (uint64_t{1} << 40)) fail(named, fmt::format("dimension {} is {}", d, dim));
      if (info.num_elements > std::numeric_limits<uint64_t>::max() / dim) {
        fail(named, "element count overflows");
      }
      info.dims[d] = dim;
      info.num_elements *= dim;
    }
    const uint32_t type_id = read<uint32_t>(named + " type");
    const auto traits = tensor_type_traits(type_id);
    if (!traits) fail(named, fmt::format("unknown or unsupported tensor type id {}", type_id));
    info.type = static_cast<TensorType>(type_id);
    if (info.dims[0] % traits->block_elements != 0) {
      fail(named, fmt::format("first dimension {} is not a multiple of the {} block size {}",
                              info.dims[0], traits->name, traits->block_elements));
    }
    info.num_bytes = info.num_elements / traits->block_elements * traits->block_bytes;
    info.offset = read<uint64_t>(named + " offset");
    if (file_.tensor_index_.contains(info.name)) fail(named, "duplicate tensor name");
    file_.tensor_index_.emplace(info.name, file_.tensors_.size());
    file_.tensors_.push_back(std::move(info));
  }

  void place_tensor_data() {
    const uint64_t a = file_.alignment_;
    const uint64_t data_start = (cursor_ + a - 1) / a * a;
    if (data_start > size_) {
      cursor_ = size_;
      if (!file_.tensors_.empty()) fail("tensor data", "file ends before the data section");
    }
    file_.data_offset_ = std::min(data_start, size_);
    const uint64_t data_size = size_ - file_.data_offset_;
    for (GgufTensorInfo& t : file_.tensors_) {
      const std::string named = fmt::format("tensor '{}'", t.name);
      if (t.offset % a != 0) fail(named, fmt::format("offset {} is not aligned to {}", t.offset, a));
      if (t.offset > data_size || t.num_bytes > data_size - t.offset) {
        fail(named, fmt::format("data [{}, +{}) lies outside the {}-byte data section", t.offset,
                                t.num_bytes, data_size));
      }
      t.data = base_ + file_.data_offset_ + t.offset;
    }
  }

  GgufFile& file_;
  const std::byte* base_;
  uint64_t size_;
  uint64_t cursor_ = 0;
};

// ---------------------------------------------------------------------------------------------
// GgufValue

std::optional<uint64_t> GgufValue::as_uint() const {
  switch (type_) {
    case GgufValueType::kUint8:
    case GgufValueType::kUint16:
    case GgufValueType::kUint32:
    case GgufValueType::kUint64: return scalar_.u;
    case GgufValueType::kInt8:
    case GgufValueType::kInt16:
    case GgufValueType::kInt32:
    case GgufValueType::kInt64:
      if (scalar_.i < 0) return std::nullopt;
      return static_cast<uint64_t>(scalar_.i);
    case GgufValueType::kFloat32:
    case GgufValueType::kFloat64:
    case GgufValueType::kBool:
    case GgufValueType::kString:
    case GgufValueType::kArray: return std::nullopt;
  }
  return std::nullopt;
}

std::optional<int64_t> GgufValue::as_int() const {
  switch (type_) {
    case GgufValueType::kInt8:
    case GgufValueType::kInt16:
    case GgufValueType::kInt32:
    case GgufValueType::kInt64: return scalar_.i;
    case GgufValueType::kUint8:
    case GgufValueType::kUint16:
    case GgufValueType::kUint32:
    case GgufValueType::kUint64:
      if (scalar_.u > static_cast<uint64_t>(std::numeric_limits<int64_t>::max())) return std::nullopt;
      return static_cast<int64_t>(scalar_.u);
    case GgufValueType::kFloat32:
    case GgufValueType::kFloat64:
    case GgufValueType::kBool:
    case GgufValueType::kString:
    case GgufValueType::kArray: return std::nullopt;
  }
  return std::nullopt;
}

std::optional<double> GgufValue::as_float() const {
  if (type_ == GgufValueType::kFloat32 || type_ == GgufValueType::kFloat64) return scalar_.f;
  return std::nullopt;
}

std::optional<bool> GgufValue::as_bool() const {
  if (type_ == GgufValueType::kBool) return scalar_.u != 0;
  return std::nullopt;
}

std::optional<std::string_view> GgufValue::as_string() const {
  if (type_ != GgufValueType::kString) return std::nullopt;
  return std::string_view(reinterpret_cast<const char*>(data_), count_);
}

std::optional<std::vector<std::string_view>> GgufValue::as_string_array() const {
  if (!is_array() || element_type_ != GgufValueType::kString) return std::nullopt;
  std::vector<std::string_view> out;
  out.reserve(count_);
  const std::byte* p = data_;  // validated by the parser: every element fits
  for (uint64_t i = 0; i < count_; ++i) {
    const uint64_t length = load<uint64_t>(p);
    out.emplace_back(reinterpret_cast<const char*>(p + 8), length);
    p += 8 + length;
  }
  return out;
}

std::optional<std::vector<int64_t>> GgufValue::as_int_array() const {
  if (!is_array()) return std::nullopt;
  std::vector<int64_t> out;
  out.reserve(count_);
  for (uint64_t i = 0; i < count_; ++i) {
    switch (element_type_) {
      case GgufValueType::kUint8: out.push_back(load<uint8_t>(data_ + i)); break;
      case GgufValueType::kInt8: out.push_back(load<int8_t>(data_ + i)); break;
      case GgufValueType::kUint16: out.push_back(load<uint16_t>(data_ + 2 * i)); break;
      case GgufValueType::kInt16: out.push_back(load<int16_t>(data_ + 2 * i)); break;
      case GgufValueType::kUint32: out.push_back(load<uint32_t>(data_ + 4 * i)); break;
      case GgufValueType::kInt32: out.push_back(load<int32_t>(data_ + 4 * i)); break;
      case GgufValueType::kInt64: out.push_back(load<int64_t>(data_ + 8 * i)); break;
      case GgufValueType::kUint64: {
        const uint64_t u = load<uint64_t>(data_ + 8 * i);
        if (u > static_cast<uint64_t>(std::numeric_limits<int64_t>::max())) return std::nullopt;
        out.push_back(static_cast<int64_t>(u));
        break;
      }
      case GgufValueType::kFloat32:
      case GgufValueType::kFloat64:
      case GgufValueType::kBool:
      case GgufValueType::kString:
      case GgufValueType::kArray: return std::nullopt;
    }
  }
  return out;
}

std::optional<std::vector<float>> GgufValue::as_float_array() const {
  if (!is_array()) return std::nullopt;
  if (element_type_ != GgufValueType::kFloat32 && element_type_ != GgufValueType::kFloat64) {
    return std::nullopt;
  }
  std::vector<float> out;
  out.reserve(count_);
  for (uint64_t i = 0; i < count_; ++i) {
    out.push_back(element_type_ == GgufValueType::kFloat32
                      ? load<float>(data_ + 4 * i)
                      : static_cast<float>(load<double>(data_ + 8 * i)));
  }
  return out;
}

// ---------------------------------------------------------------------------------------------
// GgufFile

GgufFile::GgufFile() = default;
GgufFile::GgufFile(GgufFile&&) noexcept = default;
GgufFile& GgufFile::operator=(GgufFile&&) noexcept = default;
GgufFile::~GgufFile() = default;

GgufFile GgufFile::open(const std::filesystem::path& path) {
  GgufFile file;
  file.path_ = path;
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) {
    throw GgufError(fmt::format("{}: cannot open: {}", path.string(), std::strerror(errno)));
  }
  struct stat st {};
  if (::fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
    ::close(fd);
    throw GgufError(fmt::format("{}: not a regular file", path.string()));
  }
  file.file_size_ = static_cast<uint64_t>(st.st_size);
  if (file.file_size_ == 0) {
    ::close(fd);
    throw GgufError(fmt::format("{}: invalid GGUF: the file is empty", path.string()));
  }
  void* base = ::mmap(nullptr, file.file_size_, PROT_READ, MAP_PRIVATE, fd, 0);
  ::close(fd);  // the mapping keeps the file alive
  if (base == MAP_FAILED) {
    throw GgufError(fmt::format("{}: mmap failed: {}", path.string(), std::strerror(errno)));
  }
  file.mapping_ = std::make_unique<Mapping>(static_cast<const std::byte*>(base), file.file_size_);
  GgufParser(file, file.mapping_->base, file.file_size_).parse();
  return file;
}

GgufFile GgufFile::from_bytes(std::span<const std::byte> bytes, std::filesystem::path name) {
  GgufFile file;
  file.path_ = std::move(name);
  if (bytes.empty()) {
    throw GgufError(fmt::format("{}: invalid GGUF: the file is empty", file.path_.string()));
  }
  file.file_size_ = bytes.size();
  file.mapping_ = std::make_unique<Mapping>(bytes);
  GgufParser(file, file.mapping_->base, file.file_size_).parse();
  return file;
}

const GgufValue* GgufFile::find(std::string_view key) const {
  auto it = metadata_.find(key);
  return it == metadata_.end() ? nullptr : &it->second;
}

std::optional<uint64_t> GgufFile::get_uint(std::string_view key) const {
  const GgufValue* v = find(key);
  return v ? v->as_uint() : std::nullopt;
}

std::optional<double> GgufFile::get_float(std::string_view key) const {
  const GgufValue* v = find(key);
  return v ? v->as_float() : std::nullopt;
}

std::optional<bool> GgufFile::get_bool(std::string_view key) const {
  const GgufValue* v = find(key);
  return v ? v->as_bool() : std::nullopt;
}

std::optional<std::string_view> GgufFile::get_string(std::string_view key) const {
  const GgufValue* v = find(key);
  return v ? v->as_string() : std::nullopt;
}

uint64_t GgufFile::require_uint(std::string_view key) const {
  const GgufValue* v = find(key);
  if (v == nullptr) throw GgufError(fmt::format("{}: missing metadata key '{}'", path_.string(), key));
  const auto value = v->as_uint();
  if (!value) {
    throw GgufError(fmt::format("{}: metadata key '{}' is a {}, expected a non-negative integer",
                                path_.string(), key, to_string(v->type())));
  }
  return *value;
}

std::string_view GgufFile::require_string(std::string_view key) const {
  const GgufValue* v = find(key);
  if (v == nullptr) throw GgufError(fmt::format("{}: missing metadata key '{}'", path_.string(), key));
  const auto value = v->as_string();
  if (!value) {
    throw GgufError(fmt::format("{}: metadata key '{}' is a {}, expected a string", path_.string(),
                                key, to_string(v->type())));
  }
  return *value;
}

std::string_view GgufFile::architecture() const { return require_string("general.architecture"); }

const GgufTensorInfo* GgufFile::find_tensor(std::string_view name) const {
  auto it = tensor_index_.find(name);
  return it == tensor_index_.end() ? nullptr : &tensors_[it->second];
}

}  // namespace troupe::model
