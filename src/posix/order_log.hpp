// The order mode's log of epochs (TAI_FSYNC=order with TAI_FSYNC_LOG_DIR): the format, its
// parser, and the recovery that replays the log of a process that died.
//
// Why a log: without it every epoch costs one device sync of every file it wrote, one epoch after
// the other, as many syncs as `full` makes. With it, the order thread appends every epoch queued
// behind the device to one file in one write, makes that durable with one fdatasync, and only
// then gives the epochs' writes to the cache, which writes them to their files in any order,
// unsynced. A crash can then leave the files with any subset of those writes, torn; the log,
// replayed in order, puts back the state at the end of the last batch it holds whole. So the
// files plus the log always hold a state the program had at one of its fsyncs (DESIGN section
// 3); the files alone do so only after the replay, which the next process that routes files
// with the same log directory makes before its first open (or `tai::posix::detail::
// recover_order_logs`).
//
// A checkpoint ends a log's use: every file written through it is synced, then the header's
// generation goes up (one 512-byte sector, written and synced), which voids every batch before
// it. The order thread checkpoints before anything goes to a file other than through the log
// (the gate opening, a truncation, a namespace operation, close, exit) so that a replay never
// writes an older byte over a newer one that did not come from the log.
//
// Layout: a 4096-byte header block (its first 512 bytes: magic, version, generation, the
// batches' alignment, CRC-32C), then batches, each at a multiple of the alignment (zeros between;
// 4096 when the log is written with O_DIRECT, so that the kernel copies nothing: the batch goes
// from the order thread's buffer to the device), each a fixed header (magic, generation, first and last epoch, count of
// writes, payload bytes, CRC-32C of the payload, CRC-32C of the header) and the payload (per
// write: device, inode, offset, length, path length, the path, the bytes). The parser stops at
// the first batch that is torn, of another generation, or past the end.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

struct iovec;

namespace tai::posix::detail {

inline constexpr std::uint64_t kOrderLogHeaderBytes = 4096;

/// One write of a batch, as the order thread hands it to the encoder (views, not owned).
struct OrderLogWriteView {
  std::uint64_t dev = 0, ino = 0, pos = 0;
  const std::string* path = nullptr;
  const char* bytes = nullptr;
  std::size_t size = 0;
};

/// One write of a parsed batch (owned).
struct OrderLogWrite {
  std::uint64_t dev = 0, ino = 0, pos = 0;
  std::string path;
  std::vector<char> bytes;
};

struct OrderLogBatch {
  std::uint64_t first_epoch = 0, last_epoch = 0;
  std::vector<OrderLogWrite> writes;
};

struct ParsedOrderLog {
  bool header_ok = false;       ///< false: not a log, or its header is torn (nothing to replay)
  std::uint64_t generation = 0;
  std::uint32_t align = 1;      ///< batches start at multiples of it
  std::vector<OrderLogBatch> batches;  ///< the batches of `generation`, in order, each whole
};

/// The 512 bytes at offset 0 (the rest of the header block stays zero), for batches aligned to
/// `align` (a power of two, at most 1 MiB; 1: back to back). Thread-safe (pure).
std::string encode_order_log_header(std::uint64_t generation, std::uint32_t align = 1);
/// The bytes encode_order_log_batch writes for `writes`. Thread-safe (pure).
std::size_t order_log_batch_bytes(const std::vector<OrderLogWriteView>& writes);
/// Where the next batch starts after one of `batch_bytes`: batch_bytes rounded up to `align`.
/// Thread-safe (pure).
std::size_t order_log_batch_span(std::size_t batch_bytes, std::uint32_t align);
/// Writes one batch, exactly order_log_batch_bytes(writes) bytes, at `out` (the order thread
/// encodes straight into the buffer the log's write then takes: no copy of the epochs' bytes
/// besides this one). Thread-safe (pure).
void encode_order_log_batch(std::uint64_t generation, std::uint64_t first_epoch, std::uint64_t last_epoch,
                            const std::vector<OrderLogWriteView>& writes, char* out);
/// Parses a log's bytes (see above). Thread-safe (pure).
ParsedOrderLog parse_order_log(const unsigned char* data, std::size_t size);

/// What a recovery did.
struct OrderLogRecovery {
  std::size_t logs = 0;          ///< logs of dead processes found (and removed once replayed)
  std::size_t batches = 0, writes = 0;
  std::size_t skipped = 0;       ///< writes whose file is gone or is another file now (said in `notes`)
  std::vector<std::string> notes;  ///< one line per skipped write or failure
  int error = 0;                 ///< errno of a failure that left a log in place (replayed again next time)
};

/// Replays and removes every log in `dir` whose process is gone (its lock is free): each batch's
/// writes in order, to the path each names when that path is still the same file (device and
/// inode), then an fsync of every file written and of the directory, then the log's removal.
/// Logs of live processes are left alone. Thread-safe (one recovery per log at a time, by its lock).
OrderLogRecovery recover_order_logs(const std::string& dir);

/// The log's file name in `dir` for this process: unique per process start.
std::string order_log_path(const std::string& dir);

/// fsync of the directory `dir` (a log made or removed there is durable in it). errno or 0.
int fsync_directory(const std::string& dir);

/// All n bytes at p written to fd at pos (EINTR and short writes retried). errno or 0.
int pwrite_all(int fd, const char* p, std::size_t n, std::uint64_t pos) noexcept;
/// The same for `count` (at most IOV_MAX) buffers written one after the other from pos; `iov`
/// is changed (a short write advances it). errno or 0.
int pwritev_all(int fd, struct iovec* iov, int count, std::uint64_t pos) noexcept;

}  // namespace tai::posix::detail
