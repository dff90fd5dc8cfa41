// SHA-256 and a typed, delimited hasher for cache keys (STYLE.md rule 6): every
// field is hashed as "name=value" followed by a delimiter byte, so ("ab","c") and
// ("a","bc") never collide, and the hasher can dump what it hashed for debugging.
#pragma once

#include <array>
#include <cstdint>
#include <string>
#include <string_view>

namespace autotune {

class Sha256 {
public:
  Sha256();
  void update(const void* data, size_t size);
  void update(std::string_view text) { update(text.data(), text.size()); }
  std::array<uint8_t, 32> digest();
  std::string hex_digest();

private:
  void block(const uint8_t* p);
  uint32_t m_state[8];
  uint8_t m_buffer[64];
  size_t m_buffered = 0;
  uint64_t m_total = 0;
};

std::string sha256_hex(std::string_view data);

class KeyHasher {
public:
  explicit KeyHasher(std::string_view domain);
  KeyHasher& field(std::string_view name, std::string_view value);
  KeyHasher& field(std::string_view name, int64_t value);
  std::string hex() { return m_sha.hex_digest(); }
  // "name=value" lines in the order they were hashed.
  const std::string& dump() const { return m_dump; }

private:
  Sha256 m_sha;
  std::string m_dump;
};

} // namespace autotune
