// Prints every engine of tai::list_engines() as "<name>: available" or "<name>: unavailable:
// <reason>", one a line. test/cmake_smoke's subdirectory step builds TAI with engines
// turned off and checks the reasons printed here.
#include <tai/engine_selector.hpp>

#include <cstdio>

int main() {
  for (const auto& e : tai::list_engines()) {
    if (e.available) {
      std::printf("%s: available\n", e.name.c_str());
    } else {
      std::printf("%s: unavailable: %s\n", e.name.c_str(), e.reason.c_str());
    }
  }
  return 0;
}
