// A program that links tai::testing (the test engines): wraps the posix engine in the recording
// engine, that one in the fault engine with one rule (the first write fails with EIO), writes
// twice, and checks what each engine saw. Built by test/cmake_smoke (find_package and
// pkg-config); each run must print "testing engines ok".
#include <tai/engines/fault/fault_engine.hpp>
#include <tai/engines/posix/posix_engine.hpp>
#include <tai/engines/recording/recording_engine.hpp>

#include <cerrno>
#include <cstdint>
#include <cstddef>
#include <cstdio>
#include <string>
#include <utility>
#include <vector>

namespace {

int fail(const char* what, const std::string& why) {
  std::fprintf(stderr, "testing consumer: %s: %s\n", what, why.c_str());
  return 1;
}

std::int64_t run_one(tai::Engine& engine, const tai::Request& request) {
  if (engine.submit(&request, 1) != 1) return INT64_MIN;
  tai::Completion done{};
  while (engine.reap(&done, 1, 1) != 1) {
  }
  return done.result;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 2) {
    std::fprintf(stderr, "usage: %s SCRATCH_FILE\n", argv[0]);
    return 2;
  }
  auto recording = tai::engines::make_recording(tai::engines::make_posix({}));
  tai::engines::RecordingEngine* rec = recording.get();
  auto fault = tai::engines::make_fault(std::move(recording));
  auto added = fault->add_rules("write:nth=1:errno=EIO:once");
  if (!added) return fail("add_rules", added.error().message);

  auto opened = fault->open(argv[1], tai::Open::read | tai::Open::write | tai::Open::create | tai::Open::truncate);
  if (!opened) return fail("open", opened.error().message);
  tai::EngineFile* file = opened.value().get();

  std::vector<unsigned char> data(4096, 0x5a);
  const tai::Request write = {tai::Op::write, file, data.data(), 0, data.size(), 0};
  const std::int64_t first = run_one(*fault, write);
  const std::int64_t second = run_one(*fault, write);
  if (first != -EIO) return fail("first write", "expected -EIO, got " + std::to_string(first));
  if (second != static_cast<std::int64_t>(data.size())) return fail("second write", std::to_string(second));
  if (fault->total_injections() != 1) return fail("fault", "expected one injection");
  // The injected failure never reached the recording engine below the fault engine.
  std::size_t requests = 0;
  for (const auto& e : rec->snapshot())
    if (e.kind == tai::engines::RecordEntry::Kind::request) ++requests;
  if (requests != 1) return fail("recording", std::to_string(requests) + " requests recorded");
  if (auto ec = fault->close(*file)) return fail("close", ec.message());
  std::printf("testing engines ok\n");
  return 0;
}
