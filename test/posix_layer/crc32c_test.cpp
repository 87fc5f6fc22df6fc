// The order log's checksum: the hardware path agrees with the table-driven reference at every
// length and alignment, and both give the published CRC-32C check values.
#include "src/posix/crc32c.hpp"

#include <gtest/gtest.h>

#include <cstring>
#include <random>
#include <string>
#include <vector>

namespace {

using tai::posix::detail::crc32c;
using tai::posix::detail::crc32c_has_hardware;
using tai::posix::detail::crc32c_portable;

TEST(Crc32c, PublishedCheckValues) {
  // "123456789" is the standard check string; 32 zero bytes and 32 0xFF bytes are the iSCSI
  // examples (RFC 3720, appendix B.4).
  const std::string check = "123456789";
  EXPECT_EQ(crc32c(check.data(), check.size()), 0xE3069283u);
  EXPECT_EQ(crc32c_portable(check.data(), check.size()), 0xE3069283u);
  std::vector<unsigned char> zeros(32, 0), ones(32, 0xFF);
  EXPECT_EQ(crc32c(zeros.data(), zeros.size()), 0x8A9136AAu);
  EXPECT_EQ(crc32c(ones.data(), ones.size()), 0x62A8AB43u);
  EXPECT_EQ(crc32c(nullptr, 0), 0u);
}

TEST(Crc32c, EveryLengthAndAlignmentAgreesWithTheReference) {
  if (!crc32c_has_hardware()) GTEST_SKIP() << "this CPU has no CRC-32C instruction: crc32c() is the reference itself";
  std::mt19937_64 rng(12345);
  std::vector<unsigned char> bytes(4096 + 64);
  for (auto& b : bytes) b = static_cast<unsigned char>(rng());
  for (std::size_t offset = 0; offset < 16; ++offset) {
    for (std::size_t n = 0; n <= 80; ++n) {
      ASSERT_EQ(crc32c(bytes.data() + offset, n), crc32c_portable(bytes.data() + offset, n)) << "offset " << offset << " length " << n;
    }
  }
  EXPECT_EQ(crc32c(bytes.data() + 3, 4096), crc32c_portable(bytes.data() + 3, 4096));
}

}  // namespace
