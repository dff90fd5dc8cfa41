#include "runtime/base/error.hpp"
#include "runtime/base/hash.hpp"
#include "runtime/base/strings.hpp"
#include "runtime/ops/types.hpp"

#include <doctest/doctest.h>

using namespace autotune;

TEST_CASE("sha256 matches the FIPS 180-2 test vectors") {
  CHECK(sha256_hex("") == "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855");
  CHECK(sha256_hex("abc") == "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
  CHECK(sha256_hex("abcdbcdecdefdefgefghfghighijhijkijkljklmklmnlmnomnopnopq") ==
        "248d6a61d20638b8e5c026930c3e6039a33ce45964ff2167f6ecedd419db06c1");
  std::string million(1000000, 'a');
  CHECK(sha256_hex(million) == "cdc76e5c9914fb9281a1c7e284d73e67f1809a48a497200e046d39ccc7112cd0");
}

TEST_CASE("key hashing delimits fields so that shifted boundaries never collide") {
  KeyHasher a("test");
  a.field("x", "ab").field("y", "c");
  KeyHasher b("test");
  b.field("x", "a").field("y", "bc");
  CHECK(a.hex() != b.hex());
  KeyHasher c("test");
  c.field("x", "ab").field("y", "c");
  KeyHasher d("test");
  d.field("x", "ab").field("y", "c");
  CHECK(c.hex() == d.hex());
  CHECK(c.dump() == "domain=test\nx=ab\ny=c\n");
}

TEST_CASE("shape strings parse into ordered fields and reject malformed input") {
  Fields f = parse_fields("B=8, C=4096,L=2048", "--shape");
  REQUIRE(f.size() == 3);
  CHECK(f[1].first == "C");
  CHECK(f[1].second == "4096");
  CHECK(format_fields(f) == "B=8,C=4096,L=2048");
  SUBCASE("a field without a value") {
    CHECK_THROWS_WITH_AS(parse_fields("B=8,C", "--shape"),
                         doctest::Contains("'C' is not of the form key=value"), Error);
  }
  SUBCASE("a repeated field") {
    CHECK_THROWS_WITH_AS(parse_fields("B=8,B=9", "--shape"), doctest::Contains("given twice"),
                         Error);
  }
  SUBCASE("an empty string") {
    CHECK_THROWS_AS(parse_fields("  ", "--shape"), Error);
  }
}

TEST_CASE("shape readers name the op and the field in every error") {
  Fields f = parse_fields("B=8,L=0,silu=true,bias=2", "shape");
  CHECK_THROWS_WITH_AS(ShapeReader(f, "op", {"B", "L"}),
                       doctest::Contains("op shape: unknown field 'silu' (known: B, L)"), Error);
  CHECK_THROWS_WITH_AS(ShapeReader(f, "op", {"B"}, {"B", "C"}), doctest::Contains("(known: B, C)"),
                       Error);
  const ShapeReader r(f, "op", {"B", "C", "L", "silu", "bias"});
  CHECK(r.has("B"));
  CHECK_FALSE(r.has("C"));
  CHECK(r.get("B", nullptr) == "8");
  CHECK(r.get("C", "4") == "4");
  CHECK_THROWS_WITH_AS(r.get("C", nullptr),
                       doctest::Contains("op shape: missing field 'C' (in \"B=8,L=0"), Error);
  CHECK(r.ranged("B", nullptr, 8) == 8);
  CHECK(r.ranged("C", "3", 8) == 3);
  CHECK_THROWS_WITH_AS(r.ranged("B", nullptr, 7),
                       doctest::Contains("op shape: B=8 is out of range 1..7"), Error);
  CHECK_THROWS_WITH_AS(r.ranged("L", nullptr, 7), doctest::Contains("L=0 is out of range"), Error);
  CHECK(r.flag("silu", "0") == "1");
  CHECK(r.flag("C", "false") == "0");
  CHECK_THROWS_WITH_AS(r.flag("bias", "1"), doctest::Contains("op shape: bias=2 must be 0 or 1"),
                       Error);
  CHECK_THROWS_WITH_AS(r.fail("odd"), doctest::Contains("op shape: odd"), Error);
}

TEST_CASE("integers are parsed strictly") {
  CHECK(parse_int(" 42 ", "n") == 42);
  CHECK_THROWS_WITH_AS(parse_int("4x", "n"), doctest::Contains("expected an integer"), Error);
  CHECK_THROWS_AS(parse_int("", "n"), Error);
}

TEST_CASE("error kinds map to the documented exit codes") {
  CHECK(exit_code_for(ErrorKind::usage) == 2);
  CHECK(exit_code_for(ErrorKind::config) == 2);
  CHECK(exit_code_for(ErrorKind::database) == 2);
  CHECK(exit_code_for(ErrorKind::no_device) == 3);
  CHECK(exit_code_for(ErrorKind::check) == 1);
}

TEST_CASE("kernel arguments keep their bytes and order") {
  ArgPack p;
  p.add(int(7));
  p.add((long long)-3);
  struct S {
    int a;
    double b;
  } s{1, 2.5};
  p.add(s);
  void** ptrs = p.pointers();
  CHECK(*static_cast<int*>(ptrs[0]) == 7);
  CHECK(*static_cast<long long*>(ptrs[1]) == -3);
  CHECK(static_cast<S*>(ptrs[2])->b == 2.5);
}
