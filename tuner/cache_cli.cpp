// `autotune cache ls|show|export|import|merge|verify|gc`: presentation and
// argument handling; the operations themselves are in cache/maintenance.hpp.
#include "args.hpp"
#include "commands.hpp"

#include "cache/database.hpp"
#include "cache/maintenance.hpp"
#include "runtime/base/error.hpp"
#include "runtime/base/strings.hpp"
#include "runtime/cuda/nvrtc.hpp"
#include "runtime/dispatch/variant.hpp"
#include "runtime/ops/op.hpp"

#include <unistd.h>

#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <map>
#include <random>
#include <string>
#include <utility>
#include <vector>

namespace autotune {
namespace {

namespace fs = std::filesystem;
using cache::Database;

constexpr const char* k_cache_usage = R"(usage:
  autotune cache ls [--db PATH] [--op OP] [--device TEXT] [--shape "k=v,..."] [--json]
  autotune cache show KEY-PREFIX [--db PATH]
  autotune cache export OUT.db [--db PATH] [--op OP] [--device TEXT] [--shape "k=v,..."]
  autotune cache import IN.db... [--db PATH] [--op OP] [--device TEXT] [--shape "k=v,..."]
  autotune cache merge OUT.db IN.db...
  autotune cache verify [--db PATH | FILE...]
  autotune cache gc [--db PATH]

  --device TEXT   part of the GPU name ("H100"), an arch ("sm_90a") or a device key prefix
  --shape "k=v"   problem fields that must match, e.g. "C=4096,x=bf16"
import and merge keep, on a conflict, the better-measured winner (SCHEMA.md).
verify exits 1 on any problem; gc drops entries of stale templates or NVRTC versions.
)";

struct CacheArgs {
  std::string db;
  cache::Selector selector;
  bool json = false;
  std::vector<std::string> positional;
};

CacheArgs parse_cache_args(int argc, char** argv, bool allow_selector) {
  CacheArgs a;
  for (int i = 1; i < argc; ++i) {
    std::string o = argv[i];
    auto value = [&]() { return option_value(i, argc, argv); };
    if (o == "--db") {
      a.db = value();
    } else if (allow_selector && o == "--op") {
      a.selector.op = value();
    } else if (allow_selector && o == "--device") {
      a.selector.device = value();
    } else if (allow_selector && o == "--shape") {
      a.selector.shape = value();
    } else if (o == "--json") {
      a.json = true;
    } else if (starts_with(o, "-")) {
      throw Error(ErrorKind::usage, "autotune cache " + std::string(argv[0]) +
                                        ": unknown option '" + o + "' (see autotune cache --help)");
    } else if (o.empty()) {
      throw Error(ErrorKind::usage, "autotune cache " + std::string(argv[0]) +
                                        ": an empty argument where a file name belongs");
    } else {
      a.positional.push_back(o);
    }
  }
  return a;
}

std::string db_path(const CacheArgs& a) {
  return a.db.empty() ? cache::default_database_path() : a.db;
}

void no_positional(const CacheArgs& a, const char* command) {
  if (!a.positional.empty()) {
    throw Error(ErrorKind::usage, std::string("autotune cache ") + command +
                                      ": unexpected argument '" + a.positional.front() + "'");
  }
}

// Deletes a temporary file (a migrated copy, a new database being built) and
// its SQLite companions when the command is done with it.
struct TempFile {
  std::string path;
  TempFile() = default;
  explicit TempFile(std::string p) : path(std::move(p)) {}
  TempFile(const TempFile&) = delete;
  TempFile& operator=(const TempFile&) = delete;
  TempFile(TempFile&& other) noexcept : path(std::exchange(other.path, {})) {}
  ~TempFile() {
    if (!path.empty()) {
      std::error_code ec;
      for (const char* suffix : {"", "-wal", "-shm", "-journal"}) {
        fs::remove(path + suffix, ec);
      }
    }
  }
};

// A path beside `out` (same directory, so same file system) for building it.
std::string staging_path(const std::string& out) {
  std::random_device random;
  return out + ".tmp-" + std::to_string(::getpid()) + "-" + std::to_string(random());
}

// Puts the finished file `staged` at `out`, never over an existing file: link(2)
// fails if `out` appeared meanwhile. Readers never see a half-written `out`.
void publish(const std::string& staged, const std::string& out) {
  if (::link(staged.c_str(), out.c_str()) == 0) {
    return; // the caller's TempFile removes the staged name
  }
  int err = errno;
  std::error_code ec;
  if (err != EEXIST && !fs::exists(out, ec)) {
    // A file system without hard links: rename, after the check just made.
    fs::rename(staged, out, ec);
    if (!ec) {
      return;
    }
    err = ec.value();
  }
  throw Error(err == EEXIST ? ErrorKind::usage : ErrorKind::io,
              "cannot create " + out + ": " + std::strerror(err) + "; nothing written");
}

std::string spread_pct(const cache::Entry& e) {
  if (!e.result || e.result->samples <= 0 || !(e.result->median_us > 0)) {
    return "-";
  }
  return fixed_or_dash((e.result->p90_us - e.result->p10_us) / e.result->median_us * 100, 1) + "%";
}

int cache_ls(int argc, char** argv) {
  CacheArgs a = parse_cache_args(argc, argv, true);
  no_positional(a, "ls");
  TempFile migrated;
  Database db = cache::open_source(db_path(a), migrated.path);
  std::vector<cache::Entry> entries = cache::select_entries(db, a.selector);
  if (a.json) {
    for (const cache::Entry& e : entries) {
      const cache::WinnerRecord& w = e.winner;
      std::printf("{\"key\":\"%s\",\"op\":\"%s\",\"problem\":\"%s\",\"gpu\":\"%s\",\"arch\":\"%s\","
                  "\"config\":\"%s\",\"median_us\":%s,\"samples\":%d,\"template_hash\":\"%s\","
                  "\"nvrtc_version\":\"%s\",\"updated_at\":\"%s\"}\n",
                  w.key.c_str(), json_escape(w.op).c_str(), json_escape(w.problem).c_str(),
                  json_escape(e.device ? e.device->name : "").c_str(),
                  json_escape(e.device ? e.device->arch : "").c_str(),
                  json_escape(w.config).c_str(),
                  std::isnan(w.median_us) ? "null" : fixed_or_dash(w.median_us, 3).c_str(),
                  e.result ? e.result->samples : 0, json_escape(w.template_hash).c_str(),
                  json_escape(w.nvrtc_version).c_str(), w.updated_at.c_str());
    }
    return 0;
  }
  std::printf("%-12s  %-14s  %-60s  %-22s  %10s  %7s  %-12s  %s\n", "KEY", "OP", "PROBLEM", "GPU",
              "MEDIAN_US", "SPREAD", "TEMPLATE", "CONFIG");
  for (const cache::Entry& e : entries) {
    const cache::WinnerRecord& w = e.winner;
    std::printf("%-12s  %-14s  %-60s  %-22s  %10s  %7s  %-12s  %s\n", w.key.substr(0, 12).c_str(),
                w.op.c_str(), w.problem.c_str(),
                (e.device ? e.device->name : w.device_key.substr(0, 8).insert(0, 1, '?')).c_str(),
                fixed_or_dash(w.median_us).c_str(), spread_pct(e).c_str(),
                w.template_hash.substr(0, 12).c_str(), w.config.c_str());
  }
  std::fprintf(stderr, "%zu of %zu winners in %s\n", entries.size(), db.winners().size(),
               db.path().c_str());
  return 0;
}

int cache_show(int argc, char** argv) {
  CacheArgs a = parse_cache_args(argc, argv, false);
  if (a.positional.size() != 1) {
    throw Error(ErrorKind::usage,
                "autotune cache show needs one KEY-PREFIX (see autotune cache ls)");
  }
  TempFile migrated;
  Database db = cache::open_source(db_path(a), migrated.path);
  std::vector<cache::Entry> entries = cache::find_entries(db, a.positional[0]);
  if (entries.empty()) {
    throw Error(ErrorKind::usage,
                "no winner key starts with '" + a.positional[0] + "' in " + db.path());
  }
  for (const cache::Entry& e : entries) {
    const cache::WinnerRecord& w = e.winner;
    std::printf("winner %s\n", w.key.c_str());
    std::printf(
        "  op             %s\n  problem        %s\n  config         %s\n  kernel         %s\n",
        w.op.c_str(), w.problem.c_str(), w.config.c_str(), w.kernel.c_str());
    std::printf("  median_us      %s\n  updated_at     %s\n", fixed_or_dash(w.median_us, 3).c_str(),
                w.updated_at.c_str());
    if (e.device) {
      std::printf("device %s\n  name           %s\n  arch           %s\n  cc             %d\n"
                  "  sm_count       %d\n  driver         %d\n",
                  w.device_key.c_str(), e.device->name.c_str(), e.device->arch.c_str(),
                  e.device->cc, e.device->sm_count, e.device->driver_version);
    } else {
      std::printf("device %s (no device row)\n", w.device_key.c_str());
    }
    if (e.variant) {
      std::printf("variant %s\n  template_hash  %s\n  nvrtc          %s\n  options        %s\n"
                  "  registers      %d\n  static_smem    %d\n  cubin          %s\n",
                  e.variant->key.c_str(), e.variant->template_hash.c_str(),
                  e.variant->nvrtc_version.c_str(), e.variant->options.c_str(),
                  e.variant->registers, e.variant->static_smem, e.variant->cubin_sha256.c_str());
    } else {
      std::printf("variant %s (NOT STORED)\n", w.variant_key.c_str());
    }
    if (e.result) {
      std::printf(
          "result %s\n  median_us      %s\n  p10..p90 us    %s..%s\n  samples        %d\n"
          "  sm_clock_mhz   %d\n  rel_err        %s\n",
          cache::to_string(e.result->outcome), fixed_or_dash(e.result->median_us, 3).c_str(),
          fixed_or_dash(e.result->p10_us, 3).c_str(), fixed_or_dash(e.result->p90_us, 3).c_str(),
          e.result->samples, e.result->sm_clock_mhz, fixed_or_dash(e.result->rel_err, 8).c_str());
    }
    std::string dump;
    cache::winner_key(w.device_key, w.op, w.problem, w.template_hash, w.nvrtc_version, &dump);
    std::printf("hashed into the key:\n");
    for (const std::string& line : split(dump, '\n')) {
      if (!line.empty()) {
        std::printf("  %s\n", line.c_str());
      }
    }
  }
  return 0;
}

void print_merge(const cache::MergeStats& s, const std::string& from, const std::string& into) {
  std::fprintf(stderr,
               "%s -> %s: %zu winners added, %zu replaced (better measured), %zu kept; "
               "%zu variants added; %zu cubins verified\n",
               from.c_str(), into.c_str(), s.winners_added, s.winners_replaced, s.winners_kept,
               s.variants_added, s.cubins_checked);
}

// Builds the new database `out` from checked sources: in a staging file beside
// it, put in place only when complete, so a failure leaves no `out` at all.
std::vector<cache::MergeStats> write_new_database(const std::string& out,
                                                  const std::vector<cache::CheckedSource>& sources,
                                                  bool portable) {
  TempFile staged(staging_path(out));
  std::vector<cache::MergeStats> stats;
  {
    Database target(staged.path, Database::Mode::read_write);
    stats = cache::merge_checked(target, sources);
    if (portable) {
      target.make_portable();
    }
  } // closed: the WAL is checkpointed into the file before it is published
  publish(staged.path, out);
  return stats;
}

int cache_export(int argc, char** argv) {
  CacheArgs a = parse_cache_args(argc, argv, true);
  if (a.positional.size() != 1) {
    throw Error(ErrorKind::usage, "autotune cache export needs one OUT.db");
  }
  const std::string& out = a.positional[0];
  std::error_code ec;
  if (fs::exists(fs::symlink_status(out, ec))) {
    throw Error(ErrorKind::usage, "autotune cache export: " + out +
                                      " exists; export writes a new file (use cache merge to "
                                      "add to an existing one)");
  }
  TempFile migrated;
  Database source = cache::open_source(db_path(a), migrated.path);
  cache::CheckedSource checked = cache::check_source(source, a.selector);
  if (checked.entries.empty()) {
    throw Error(ErrorKind::usage, "autotune cache export: nothing in " + db_path(a) +
                                      " matches the selection; no file written");
  }
  print_merge(write_new_database(out, {checked}, true).front(), db_path(a), out);
  return 0;
}

// Adds the winners of `inputs` to `target_path` (created if missing): every input
// is opened and checked before the target is touched, and the winners of all of
// them are written in one transaction (cache::merge_checked).
int import_into(const std::string& target_path, const std::vector<std::string>& inputs,
                const cache::Selector& selector, bool new_file) {
  std::vector<TempFile> migrated(inputs.size());
  std::vector<Database> sources;
  sources.reserve(inputs.size());
  for (size_t i = 0; i < inputs.size(); ++i) {
    sources.push_back(cache::open_source(inputs[i], migrated[i].path));
  }
  std::vector<cache::CheckedSource> checked;
  for (const Database& source : sources) {
    checked.push_back(cache::check_source(source, selector));
  }
  std::vector<cache::MergeStats> stats;
  if (new_file) {
    stats = write_new_database(target_path, checked, false);
  } else {
    Database target(target_path, Database::Mode::read_write);
    stats = cache::merge_checked(target, checked);
  }
  for (size_t i = 0; i < inputs.size(); ++i) {
    // The user's name for it, not that of a migrated temporary copy.
    print_merge(stats[i], inputs[i], target_path);
  }
  return 0;
}

int cache_import(int argc, char** argv) {
  CacheArgs a = parse_cache_args(argc, argv, true);
  if (a.positional.empty()) {
    throw Error(ErrorKind::usage, "autotune cache import needs at least one IN.db");
  }
  return import_into(db_path(a), a.positional, a.selector, false);
}

int cache_merge(int argc, char** argv) {
  CacheArgs a = parse_cache_args(argc, argv, false);
  if (!a.db.empty()) {
    throw Error(ErrorKind::usage, "autotune cache merge takes OUT.db IN.db..., not --db");
  }
  if (a.positional.size() < 2) {
    throw Error(ErrorKind::usage, "autotune cache merge needs OUT.db and at least one IN.db");
  }
  const std::string& out = a.positional.front();
  std::vector<std::string> inputs(a.positional.begin() + 1, a.positional.end());
  std::error_code ec;
  bool exists = fs::exists(fs::symlink_status(out, ec));
  return import_into(out, inputs, {}, !exists);
}

// Verifies each file; a file that cannot be opened is a problem too (exit 1).
int cache_verify(int argc, char** argv) {
  CacheArgs a = parse_cache_args(argc, argv, false);
  if (!a.db.empty() && !a.positional.empty()) {
    throw Error(ErrorKind::usage, "autotune cache verify takes --db PATH or FILE..., not both");
  }
  std::vector<std::string> files = a.positional;
  if (files.empty()) {
    files.push_back(db_path(a));
  }
  size_t bad = 0;
  for (const std::string& file : files) {
    cache::VerifyReport report;
    try {
      TempFile migrated;
      Database db = cache::open_source(file, migrated.path);
      if (!migrated.path.empty()) {
        std::printf("%s: schema version older than %d; verifying a migrated copy (the file is "
                    "migrated in place by its next read-write open)\n",
                    file.c_str(), cache::k_schema_version);
      }
      report = cache::verify(db);
    } catch (const Error& e) {
      report.problems.push_back(e.what());
    }
    for (const std::string& p : report.problems) {
      std::printf("%s: %s\n", file.c_str(), p.c_str());
    }
    if (report.problems.empty()) {
      std::printf("%s: ok (%zu winners, %zu variants, every cubin checksum verified)\n",
                  file.c_str(), report.winners, report.variants);
    } else {
      ++bad;
      std::printf("%s: %zu problems\n", file.c_str(), report.problems.size());
    }
  }
  return bad ? 1 : 0;
}

int cache_gc(int argc, char** argv) {
  CacheArgs a = parse_cache_args(argc, argv, false);
  no_positional(a, "gc");
  std::string why;
  if (!cuda::nvrtc_available(&why)) {
    // Without NVRTC nothing tells which entries are current: deleting by guess
    // would throw away every cubin.
    throw Error(ErrorKind::no_device, "autotune cache gc needs NVRTC to know the current "
                                      "version: " +
                                          why);
  }
  std::map<std::string, std::string> hashes;
  for (const std::string& name : op_names()) {
    hashes[name] = template_hash(find_op(name).template_path());
  }
  Database db(db_path(a), Database::Mode::read_write);
  cache::GcStats s = db.remove_stale(hashes, cuda::nvrtc_version());
  std::printf("%s: removed %zu winners, %zu variants, %zu results, %zu cubins (NVRTC %s is "
              "current; ops this build does not know are kept unless their NVRTC is stale)\n",
              db.path().c_str(), s.winners, s.variants, s.results, s.cubins,
              cuda::nvrtc_version().c_str());
  return 0;
}

} // namespace

int run_cache_command(int argc, char** argv) {
  if (argc < 2) {
    std::fputs(k_cache_usage, stderr);
    return 2;
  }
  std::string command = argv[1];
  for (int i = 1; i < argc; ++i) {
    std::string o = argv[i];
    if (o == "--help" || o == "-h") {
      std::fputs(k_cache_usage, stdout);
      return 0;
    }
  }
  // The command's own argv: argv[0] is its name.
  int sub_argc = argc - 1;
  char** sub_argv = argv + 1;
  if (command == "ls") {
    return cache_ls(sub_argc, sub_argv);
  }
  if (command == "show") {
    return cache_show(sub_argc, sub_argv);
  }
  if (command == "export") {
    return cache_export(sub_argc, sub_argv);
  }
  if (command == "import") {
    return cache_import(sub_argc, sub_argv);
  }
  if (command == "merge") {
    return cache_merge(sub_argc, sub_argv);
  }
  if (command == "verify") {
    return cache_verify(sub_argc, sub_argv);
  }
  if (command == "gc") {
    return cache_gc(sub_argc, sub_argv);
  }
  throw Error(ErrorKind::usage, "unknown cache command '" + command +
                                    "' (ls, show, export, import, merge, verify, gc)");
}

} // namespace autotune
