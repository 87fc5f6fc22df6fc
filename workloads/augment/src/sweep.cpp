#include "sweep.hpp"

#include <fmt/core.h>
#include <fmt/format.h>
#include <sys/stat.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <ctime>
#include <functional>
#include <map>
#include <optional>
#include <thread>

#include "median.hpp"
#include "record.hpp"

namespace augment {

namespace {

bool is_tai(const std::string& method) { return method.rfind("tai-", 0) == 0; }

// One run of the sweep. A method that does not depend on the TAI load (everything but TAI) runs
// once per x and serves both load panels: `panel` is then empty.
struct Point {
  std::string figure;
  std::string panel;
  unsigned x = 0;
  std::string method;
  RunConfig config;
};

struct Figure {
  std::string id;         // "3.1"
  std::string title;
  std::string xlabel;
  std::vector<std::string> panels;
  bool categorical_x = false;  // x values are labels (fsync frequency: "never")
};

std::string x_label(const Figure& f, unsigned x) {
  if (!f.categorical_x) return std::to_string(x);
  return x == 0 ? "never" : std::to_string(x);
}

std::string file_id(const std::string& figure) {
  std::string s = "fig" + figure;
  std::replace(s.begin(), s.end(), '.', '_');
  return s;
}

// The medians of one metric of one figure: panel -> x -> method -> value.
using Series = std::map<std::string, std::map<unsigned, std::map<std::string, double>>>;

void write_dat_and_script(const std::string& dir, const std::string& name, const Figure& fig, const Series& series,
                          const std::vector<std::string>& methods, const std::string& ylabel, bool log_y = false) {
  const std::vector<std::string>& panels = fig.panels;
  for (const std::string& panel : panels) {
    std::FILE* f = std::fopen((dir + "/" + name + "." + panel + ".dat").c_str(), "w");
    if (!f) continue;
    std::fprintf(f, "x");
    for (const std::string& m : methods) std::fprintf(f, "\t%s", m.c_str());
    std::fprintf(f, "\n");
    auto p = series.find(panel);
    if (p != series.end())
      for (const auto& [x, values] : p->second) {
        std::fprintf(f, "%s", x_label(fig, x).c_str());
        for (const std::string& m : methods) {
          auto v = values.find(m);
          std::fprintf(f, "\t%s", v == values.end() || std::isnan(v->second) ? "NaN" : fmt::format("{:.4g}", v->second).c_str());
        }
        std::fprintf(f, "\n");
      }
    std::fclose(f);
  }
  std::FILE* g = std::fopen((dir + "/" + name + ".gp").c_str(), "w");
  if (!g) return;
  // noenhanced: titles such as "O_DIRECT" are plain text, not gnuplot's subscript markup.
  std::fprintf(g, "set terminal pngcairo size %d,420 font ',10' noenhanced\nset output '%s.png'\n", 460 * int(panels.size()),
               name.c_str());
  std::fprintf(g, "set multiplot layout 1,%zu title '%s'\nset key top left font ',9'\nset grid\n", panels.size(),
               fig.title.c_str());
  std::fprintf(g, "set xlabel '%s'\nset ylabel '%s'\n%s", fig.xlabel.c_str(), ylabel.c_str(),
               log_y ? "set logscale y\n" : "");
  for (const std::string& panel : panels) {
    std::fprintf(g, "set title '%s'\n", panel.c_str());
    if (fig.categorical_x)
      std::fprintf(g, "plot for [i=2:%zu] '%s.%s.dat' using 0:i:xtic(1) with linespoints title columnheader(i)\n",
                   methods.size() + 1, name.c_str(), panel.c_str());
    else
      std::fprintf(g, "set logscale x 2\nplot for [i=2:%zu] '%s.%s.dat' using 1:i with linespoints title columnheader(i)\nunset logscale x\n",
                   methods.size() + 1, name.c_str(), panel.c_str());
  }
  std::fprintf(g, "unset multiplot\n");
  std::fclose(g);
}

bool have_gnuplot() { return std::system("gnuplot --version >/dev/null 2>&1") == 0; }

void remove_run_files(const RunResult& r) {
  for (const std::string& f : r.files) {
    std::remove(f.c_str());
    std::remove(index_path(f).c_str());
  }
  if (!r.manifest.empty()) std::remove(r.manifest.c_str());
}

}  // namespace

unsigned amplify_for(const std::vector<EncodedImage>& input, const RunConfig& base, std::uint64_t bytes) {
  const std::size_t sample = std::min<std::size_t>(input.size(), 24);
  std::uint64_t sampled = 0;
  Bytes record;
  for (std::size_t i = 0; i < sample; ++i)
    if (make_output_record(input[i], base, record, nullptr)) sampled += record.size();
  if (sampled == 0) return 1;
  const double per_image = double(sampled) / double(sample);
  const double one_pass = per_image * double(input.size());
  return unsigned(std::max(1.0, std::ceil(double(bytes) / one_pass)));
}

namespace {

bool make_dir(const std::string& dir) {
  if (::mkdir(dir.c_str(), 0755) == 0 || errno == EEXIST) return true;
  fmt::print(stderr, "sweep: cannot create {}\n", dir);
  return false;
}

std::map<std::string, Figure> sweep_figures() {
  return {
      {"3.1", {"3.1", "Buffered: throughput vs compute threads (no overwrite, final fsync only)", "compute threads", {"fixed", "full"}}},
      {"3.3", {"3.3", "Overwrite, fsync every 30 writes", "compute threads", {"fixed", "full"}}},
      {"3.4", {"3.4", "Overwrite, fsync every 300 writes", "compute threads", {"fixed", "full"}}},
      {"3.5", {"3.5", "O_DIRECT overwrite, fsync every 300 writes (cstdio: buffered, for reference)", "compute threads", {"fixed", "full"}}},
      {"3.6", {"3.6", "Single thread: throughput vs fsync frequency", "fsync every N writes", {"buffered", "direct"}, true}},
  };
}

// The points, per figure and x, in method order; the run order rotates the methods per repeat.
// Empty, with a message, when a figure is unknown.
std::optional<std::vector<std::vector<Point>>> sweep_points(const RunConfig& base, const SweepOptions& o,
                                                            const std::map<std::string, Figure>& figures,
                                                            unsigned amplify, unsigned hw) {
  std::vector<std::vector<Point>> groups;
  auto with = [&](unsigned threads, bool overwrite, unsigned every, bool direct) {
    RunConfig c = base;
    c.threads = threads;
    c.method.compute_threads = threads;
    c.amplify = amplify;
    c.overwrite = overwrite;
    c.fsync_every = every;
    c.method.direct = direct;
    c.files = 1;
    return c;
  };
  for (const std::string& id : o.figures) {
    if (!figures.count(id)) {
      fmt::print(stderr, "sweep: unknown figure {} (3.1, 3.3, 3.4, 3.5, 3.6; 3.2, 3.7 and 3.8 come with 3.1)\n", id);
      return std::nullopt;
    }
    if (id == "3.6") {
      for (const char* panel : {"buffered", "direct"})
        for (unsigned every : o.fsync_frequencies) {
          std::vector<Point> g;
          for (const std::string& m : o.methods) {
            const bool direct = panel == std::string("direct") && m != "cstdio" && m != "fstream";
            RunConfig c = with(1, false, every, direct);
            c.method.tai_workers = 2;
            g.push_back({id, panel, every, m, c});
          }
          groups.push_back(std::move(g));
        }
      continue;
    }
    const bool overwrite = id != "3.1";
    const unsigned every = id == "3.3" ? 30 : id == "3.1" ? 0 : 300;
    for (unsigned threads : o.threads) {
      std::vector<Point> g;
      for (const std::string& m : o.methods) {
        const bool direct = id == "3.5" && m != "cstdio" && m != "fstream";
        if (!is_tai(m)) {
          g.push_back({id, "", threads, m, with(threads, overwrite, every, direct)});
          continue;
        }
        for (const char* panel : {"fixed", "full"}) {
          RunConfig c = with(threads, overwrite, every, direct);
          c.method.tai_workers = panel == std::string("fixed") ? 2u : std::max(1u, hw > threads ? hw - threads : 1u);
          g.push_back({id, panel, threads, m, c});
        }
      }
      groups.push_back(std::move(g));
    }
  }
  return groups;
}

// What the sweep's runs gave.
struct SweepRuns {
  // figure -> panel ("" for both) -> x -> method -> runs
  std::map<std::string, std::map<std::string, std::map<unsigned, std::map<std::string, std::vector<RunResult>>>>> runs;
  std::map<std::string, std::string> notes;  // method -> what it said, or why it was skipped
  bool failed = false;
};

SweepRuns run_points(const std::vector<EncodedImage>& input, const std::vector<std::vector<Point>>& groups,
                     const SweepOptions& o, const std::string& work) {
  std::size_t total = 0;
  for (const auto& g : groups) total += g.size();
  total *= o.repeat;
  SweepRuns out;
  std::size_t done = 0;
  const auto t0 = std::chrono::steady_clock::now();
  for (unsigned r = 0; r < o.repeat; ++r)
    for (const auto& g : groups)
      for (std::size_t k = 0; k < g.size(); ++k) {
        const Point& p = g[(k + r) % g.size()];
        // A method this build or machine does not have is a note, not a failure.
        if (const MethodInfo* info = find_method(p.method, nullptr); info && !info->unavailable.empty()) {
          out.notes[p.method] = "skipped: " + info->unavailable;
          ++done;
          continue;
        }
        const std::string stem = work + "/sweep";
        RunResult res = run_method(input, p.method, stem, p.config);
        remove_run_files(res);
        ++done;
        const double elapsed = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
        if (!res.refused.empty()) {
          out.notes[p.method + (p.config.method.direct ? " (direct)" : "")] = "skipped: " + res.refused;
          continue;
        }
        if (!res.ok()) {
          fmt::print("sweep: {} {} x={} {}: FAILED: {}\n", p.figure, p.panel, p.x, p.method, res.error);
          out.failed = true;
          continue;
        }
        if (!res.note.empty()) out.notes[p.method] = res.note;
        fmt::print("sweep: [{}/{}] fig {} {} x={} {}: {:.1f} MB/s, {:.2f} s (elapsed {:.0f} s, ETA {:.0f} s)\n", done,
                   total, p.figure, p.panel.empty() ? "-" : p.panel, p.x, p.method, res.bytes / 1e6 / res.wall_s,
                   res.wall_s, elapsed, elapsed / double(done) * double(total - done));
        std::fflush(stdout);
        out.runs[p.figure][p.panel][p.x][p.method].push_back(std::move(res));
      }
  return out;
}

// Medians: the run with the median wall time gives every other figure of its point.
Series metric_series(const Figure& figure, const SweepRuns& sweep, const std::string& fig,
                     const std::function<double(const RunResult&)>& value) {
  Series s;
  const auto by_panel = sweep.runs.find(fig);
  if (by_panel == sweep.runs.end()) return s;
  for (const std::string& panel : figure.panels)
    for (const auto& [p, by_x] : by_panel->second) {
      if (!p.empty() && p != panel) continue;
      for (const auto& [x, by_method] : by_x)
        for (const auto& [m, rs] : by_method) {
          std::vector<RunResult> sorted = rs;
          std::sort(sorted.begin(), sorted.end(), [](const RunResult& a, const RunResult& b) { return a.wall_s < b.wall_s; });
          std::vector<double> vals;
          for (const RunResult& x_run : sorted) vals.push_back(value(x_run));
          s[panel][x][m] = median(vals, std::nan(""));
        }
    }
  return s;
}

void write_results_header(std::FILE* md, const std::vector<EncodedImage>& input, const SweepOptions& o, unsigned hw,
                          unsigned amplify, const std::map<std::string, std::string>& notes) {
  std::time_t now = std::time(nullptr);
  char when[64];
  std::strftime(when, sizeof when, "%Y-%m-%d %H:%M UTC", std::gmtime(&now));
  std::fprintf(md, "# tai-augment sweep\n\nCommand: `%s`\n\nRun %s on %u hardware threads; %zu images, amplify %u "
               "(each run writes >= %.0f MiB), %u repeat(s), methods interleaved in a rotating order per repeat; "
               "every figure is the median over the repeats.\n\n",
               o.command.c_str(), when, hw, input.size(), amplify, o.bytes_per_point / 1048576.0, o.repeat);
  for (const auto& [m, n] : notes) std::fprintf(md, "- %s: %s\n", m.c_str(), n.c_str());
  std::fprintf(md, "\n");
}

// A figure's MB/s as a table per panel, each value with its ratio to posix.
void write_figure_table(std::FILE* md, const std::string& id, const Figure& fig, const Series& s,
                        const std::vector<std::string>& method_columns) {
  std::fprintf(md, "## Figure %s: %s\n\nMB/s of un-overwritten output (ratio to posix).\n\n", id.c_str(), fig.title.c_str());
  for (const std::string& panel : fig.panels) {
    std::fprintf(md, "%s\n\n| %s |", panel.c_str(), fig.xlabel.c_str());
    for (const std::string& m : method_columns) std::fprintf(md, " %s |", m.c_str());
    std::fprintf(md, "\n|---|");
    for (std::size_t i = 0; i < method_columns.size(); ++i) std::fprintf(md, "---|");
    std::fprintf(md, "\n");
    auto p = s.find(panel);
    if (p == s.end()) continue;
    for (const auto& [x, vals] : p->second) {
      std::fprintf(md, "| %s |", x_label(fig, x).c_str());
      const auto posix = vals.find("posix");
      for (const std::string& m : method_columns) {
        auto v = vals.find(m);
        if (v == vals.end()) {
          std::fprintf(md, " - |");
          continue;
        }
        if (posix != vals.end() && posix->second > 0)
          std::fprintf(md, " %.1f (%.2fx) |", v->second, v->second / posix->second);
        else
          std::fprintf(md, " %.1f |", v->second);
      }
      std::fprintf(md, "\n");
    }
    std::fprintf(md, "\n");
  }
}

// Figures 3.2 and 3.8: other counters of figure 3.1's runs.
void write_figure_3_1_companions(const std::string& out_dir, const Figure& fig, const SweepRuns& sweep,
                                 const std::vector<std::string>& method_columns) {
  Figure vcs = fig;
  vcs.id = "3.2";
  vcs.title = "Voluntary context switches (the runs of figure 3.1)";
  write_dat_and_script(out_dir, "fig3_2", vcs,
                       metric_series(fig, sweep, "3.1", [](const RunResult& r) { return double(r.voluntary_switches); }),
                       method_columns, "voluntary context switches", true);
  Figure one = fig;
  one.panels = {"fixed"};
  const std::pair<const char*, std::function<double(const RunResult&)>> parts[] = {
      {"compute", [](const RunResult& r) { return r.compute_s; }},
      {"minor_faults", [](const RunResult& r) { return double(r.minor_faults); }},
      {"user", [](const RunResult& r) { return r.user_s; }},
      {"sys", [](const RunResult& r) { return r.sys_s; }}};
  for (const auto& [part, fn] : parts) {
    one.id = "3.8";
    one.title = std::string("The runs of figure 3.1 (fixed load): ") + part;
    write_dat_and_script(out_dir, std::string("fig3_8_") + part, one, metric_series(fig, sweep, "3.1", fn),
                         method_columns, std::string(part) + (std::string(part) == "minor_faults" ? "" : " (s)"));
  }
}

// Draws the PNGs from the .gp scripts when gnuplot is there; false when it failed.
bool draw_figures(const std::string& out_dir) {
  if (!have_gnuplot()) {
    fmt::print("sweep: gnuplot not found: the .dat tables, .gp scripts and results.md are in {}, no PNG drawn\n", out_dir);
    return true;
  }
  const std::string draw = "cd '" + out_dir + "' && for g in fig*.gp; do gnuplot \"$g\" || exit 1; done";
  if (std::system(draw.c_str()) != 0) {
    fmt::print("sweep: gnuplot failed; the .dat and .gp files are in {}\n", out_dir);
    return false;
  }
  fmt::print("sweep: figures (PNG), tables (.dat) and results.md in {}\n", out_dir);
  return true;
}

}  // namespace

int run_sweep(const std::vector<EncodedImage>& input, const RunConfig& base, const SweepOptions& o) {
  if (!make_dir(o.out_dir)) return 2;
  const std::string work = o.work_dir.empty() ? o.out_dir + "/runs" : o.work_dir;
  if (!make_dir(work)) return 2;
  const unsigned hw = std::max(1u, std::thread::hardware_concurrency());
  const unsigned amplify = amplify_for(input, base, o.bytes_per_point);
  fmt::print("sweep: {} images, amplify {} (each run writes >= {:.0f} MiB), {} repeat(s), threads {}, figures {}\n",
             input.size(), amplify, o.bytes_per_point / 1048576.0, o.repeat, fmt::format("{}", fmt::join(o.threads, ",")),
             o.figures.size());

  const std::map<std::string, Figure> figures = sweep_figures();
  const auto groups = sweep_points(base, o, figures, amplify, hw);
  if (!groups) return 2;
  const SweepRuns sweep = run_points(input, *groups, o, work);
  bool failed = sweep.failed;

  auto mbps = [](const RunResult& r) { return r.bytes / 1e6 / r.wall_s; };
  const std::vector<std::string>& method_columns = o.methods;
  std::FILE* md = std::fopen((o.out_dir + "/results.md").c_str(), "w");
  if (md) write_results_header(md, input, o, hw, amplify, sweep.notes);
  for (const std::string& id : o.figures) {
    const Figure& fig = figures.at(id);
    const Series s = metric_series(fig, sweep, id, mbps);
    write_dat_and_script(o.out_dir, file_id(id), fig, s, method_columns, "MB/s of un-overwritten output");
    if (md) write_figure_table(md, id, fig, s, method_columns);
    if (id == "3.1") write_figure_3_1_companions(o.out_dir, fig, sweep, method_columns);
  }
  if (md) std::fclose(md);

  if (!draw_figures(o.out_dir)) failed = true;
  return failed ? 1 : 0;
}

}  // namespace augment
