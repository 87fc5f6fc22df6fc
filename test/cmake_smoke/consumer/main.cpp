// The smallest TAI program: make the posix engine by name, write 4 KiB, fsync, read them back.
// Built three ways by test/cmake_smoke (find_package, add_subdirectory, pkg-config); each run
// must print "round trip ok".
#include <tai/config.hpp>
#include <tai/engine_selector.hpp>
#include <tai/engines/posix/posix_engine.hpp>  // the installed spelling of an engine header

#include <cstdint>
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

namespace {

int fail(const char* what, const std::string& why) {
  std::fprintf(stderr, "consumer: %s: %s\n", what, why.c_str());
  return 1;
}

// Submits `n` requests and reaps all of them; completion i goes to result[user_data].
bool run(tai::Engine& engine, const tai::Request* requests, std::size_t n, std::int64_t* result) {
  if (engine.submit(requests, n) != n) return false;
  std::vector<tai::Completion> done(n);
  std::size_t reaped = 0;
  while (reaped < n) reaped += engine.reap(done.data() + reaped, n - reaped, n - reaped);
  for (const auto& c : done) result[c.user_data] = c.result;
  return true;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 2) {
    std::fprintf(stderr, "usage: %s SCRATCH_FILE\n", argv[0]);
    return 2;
  }
  const std::string path = argv[1];

  auto made = tai::make_engine("posix");
  if (!made) return fail("make_engine(\"posix\")", made.error().message);
  tai::Engine& engine = *made.value();
  // The factory of the engine header must name the same engine as the selector.
  if (tai::engines::make_posix({})->name() != engine.name()) return fail("make_posix", "wrong engine");

  auto opened = engine.open(path, tai::Open::read | tai::Open::write | tai::Open::create | tai::Open::truncate);
  if (!opened) return fail("open", opened.error().message);
  tai::EngineFile* file = opened.value().get();

  constexpr std::size_t kSize = 4096;
  std::vector<unsigned char> written(kSize), read_back(kSize, 0);
  for (std::size_t i = 0; i < kSize; ++i) written[i] = static_cast<unsigned char>(i * 131 + 7);

  std::int64_t result[3] = {-1, -1, -1};
  const tai::Request write_then_sync[2] = {
      {tai::Op::write, file, written.data(), 0, kSize, 0},
      {tai::Op::fsync, file, nullptr, 0, 0, 1},
  };
  const tai::Request read = {tai::Op::read, file, read_back.data(), 0, kSize, 2};
  if (!run(engine, write_then_sync, 2, result) || !run(engine, &read, 1, result))
    return fail("submit", "the engine took fewer requests than given");
  if (result[0] != static_cast<std::int64_t>(kSize)) return fail("write", std::to_string(result[0]));
  if (result[1] != 0) return fail("fsync", std::to_string(result[1]));
  if (result[2] != static_cast<std::int64_t>(kSize)) return fail("read", std::to_string(result[2]));
  if (std::memcmp(written.data(), read_back.data(), kSize) != 0) return fail("read", "data differs");
  if (auto ec = engine.close(*file)) return fail("close", ec.message());

  std::printf("TAI %s, engine '%s': %zu-byte round trip ok\n", TAI_VERSION,
              std::string(engine.name()).c_str(), kSize);
  return 0;
}
