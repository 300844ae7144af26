#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "transport/tcp/sha256.h"

namespace perseus::transport::tcp {
namespace {

std::string hex(const Digest& d) { return toHex(d.data(), d.size()); }

std::string shaHex(const std::string& text) { return hex(sha256(text.data(), text.size())); }

TEST(Sha256, FipsVectors) {
  EXPECT_EQ(shaHex(""), "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855");
  EXPECT_EQ(shaHex("abc"), "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
  EXPECT_EQ(shaHex("abcdbcdecdefdefgefghfghighijhijkijkljklmklmnlmnomnopnopq"),
            "248d6a61d20638b8e5c026930c3e6039a33ce45964ff2167f6ecedd419db06c1");
  EXPECT_EQ(shaHex(std::string(1000000, 'a')),
            "cdc76e5c9914fb9281a1c7e284d73e67f1809a48a497200e046d39ccc7112cd0");
}

TEST(Sha256, IncrementalEqualsOneShotAtEveryPaddingBoundary) {
  std::string text;
  for (int i = 0; i < 200; ++i) text.push_back(static_cast<char>(i * 7));
  for (size_t len = 0; len <= text.size(); ++len) {
    for (size_t split : {size_t{0}, len / 3, len / 2, len}) {
      Sha256 s;
      s.update(text.data(), split);
      s.update(text.data() + split, len - split);
      ASSERT_EQ(hex(s.finish()), hex(sha256(text.data(), len))) << "len " << len;
    }
  }
}

struct HmacVector {
  std::vector<uint8_t> key;
  std::string data;
  std::string mac;
};

// RFC 4231 test cases 1-4, 6 and 7 (case 5 tests truncation, which Perseus does not use).
TEST(HmacSha256, Rfc4231Vectors) {
  std::vector<uint8_t> key4;
  for (int i = 1; i <= 25; ++i) key4.push_back(static_cast<uint8_t>(i));
  const std::vector<HmacVector> vectors = {
      {std::vector<uint8_t>(20, 0x0b), "Hi There",
       "b0344c61d8db38535ca8afceaf0bf12b881dc200c9833da726e9376c2e32cff7"},
      {{'J', 'e', 'f', 'e'},
       "what do ya want for nothing?",
       "5bdcc146bf60754e6a042426089575c75a003f089d2739839dec58b964ec3843"},
      {std::vector<uint8_t>(20, 0xaa), std::string(50, '\xdd'),
       "773ea91e36800e46854db8ebd09181a72959098b3ef8c122d9635514ced565fe"},
      {key4, std::string(50, '\xcd'),
       "82558a389a443c0ea4cc819899f2083a85f0faa3e578f8077a2e3ff46729665b"},
      {std::vector<uint8_t>(131, 0xaa), "Test Using Larger Than Block-Size Key - Hash Key First",
       "60e431591ee0b67f0d8a26aacbf5b77f8e0bc6213728c5140546040f0ee37f54"},
      {std::vector<uint8_t>(131, 0xaa),
       "This is a test using a larger than block-size key and a larger than block-size data. "
       "The key needs to be hashed before being used by the HMAC algorithm.",
       "9b09ffa71b942fcb27635fbcd5b0e944bfdc63644f0713938a7f51535c3a35e2"},
  };
  for (size_t i = 0; i < vectors.size(); ++i) {
    const auto& v = vectors[i];
    EXPECT_EQ(hex(hmacSha256(v.key.data(), v.key.size(), v.data.data(), v.data.size())), v.mac)
        << "vector " << i;
  }
}

TEST(HmacSha256, ConstantTimeEqual) {
  uint8_t a[4] = {1, 2, 3, 4}, b[4] = {1, 2, 3, 5};
  EXPECT_TRUE(constantTimeEqual(a, a, 4));
  EXPECT_FALSE(constantTimeEqual(a, b, 4));
  EXPECT_TRUE(constantTimeEqual(a, b, 3));
}

}  // namespace
}  // namespace perseus::transport::tcp
