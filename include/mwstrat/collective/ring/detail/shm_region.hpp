#pragma once
// A POSIX shared-memory region that carries one ring link's payloads between two processes on the same host:
// `slots` fixed-size slots, written by the sender (the creator) and read by the receiver (or, as one slot, the
// region every rank of a host maps read-write: `host_arena`). The creator makes it
// under an unguessable name (O_EXCL, mode 0600) and reserves its pages up front (posix_fallocate, so a full
// /dev/shm is an error here rather than a SIGBUS later); the receiver checks owner, mode and size before mapping
// it read-only, then unlinks the name, so the object lives on only as the two mappings.

#include <mwstrat/collective/ring/detail/wire.hpp>
#include <mwstrat/detail/host_identity.hpp>

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <openssl/rand.h>

#include <array>
#include <cerrno>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <string>
#include <utility>

namespace mwstrat::detail {

// Where POSIX shared memory lives on Linux (what shm_open uses); a parameter so tests can point elsewhere.
inline constexpr const char* shm_directory = "/dev/shm";

// What two processes must share for one's /dev/shm object to be the other's: the kernel instance (boot id), the
// user, and the IPC and mount namespaces (containers on one kernel do not share /dev/shm). Hashed, so the
// handshake does not reveal it; the hostname is included so distinct machines never compare equal by accident.
inline digest host_identity() {
  const auto link = [](const char* path) {
    std::array<char, 256> buf{};
    const auto n = ::readlink(path, buf.data(), buf.size() - 1);
    return n > 0 ? std::string(buf.data(), static_cast<std::size_t>(n)) : std::string("?");
  };
  std::string id = "mwstrat-host.1";
  for (const auto& part : {kernel_boot_id(), host_name(),
                           std::to_string(::geteuid()), link("/proc/self/ns/ipc"), link("/proc/self/ns/mnt")}) {
    id += '\0';
    id += part;
  }
  return sha256(id);
}

// An identity given explicitly (`ring_options::host_identity`), hashed like the derived one but never equal to it.
inline digest explicit_host_identity(const std::string& name) { return sha256("mwstrat-host.explicit" + std::string(1, '\0') + name); }

class shm_region {
 public:
  shm_region() = default;
  shm_region(shm_region&& o) noexcept { *this = std::move(o); }
  shm_region& operator=(shm_region&& o) noexcept {
    if (this != &o) {
      reset();
      base_ = std::exchange(o.base_, nullptr);
      bytes_ = std::exchange(o.bytes_, 0);
      slots_ = std::exchange(o.slots_, 0);
      slot_bytes_ = std::exchange(o.slot_bytes_, 0);
      path_ = std::exchange(o.path_, {});
      name_ = std::exchange(o.name_, {});
    }
    return *this;
  }
  shm_region(const shm_region&) = delete;
  shm_region& operator=(const shm_region&) = delete;
  ~shm_region() { reset(); }

  // The sender's side: a fresh object in `dir`; "" on success, else why not (the caller falls back to TCP).
  std::string create(const std::string& dir, std::size_t slots, std::size_t slot_bytes) {
    reset();
    std::uint8_t random[16];
    if (RAND_bytes(random, sizeof random) != 1) return "no random bytes for a shared-memory name";
    std::string name = std::string(shm_prefix) + std::to_string(::getpid()) + "-";
    for (auto b : random) {
      char hex[3];
      std::snprintf(hex, sizeof hex, "%02x", b);
      name += hex;
    }
    const std::string path = dir + "/" + name;
    const int fd = ::open(path.c_str(), O_RDWR | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600);
    if (fd < 0) return "cannot create " + path + ": " + std::strerror(errno);
    path_ = path;  // from here on reset() unlinks it
    name_ = name;
    const std::size_t bytes = slots * slot_bytes;
    if (int rc = ::posix_fallocate(fd, 0, static_cast<off_t>(bytes)); rc != 0) {
      ::close(fd);
      const std::string why = "cannot reserve " + std::to_string(bytes) + " bytes in " + dir + ": " + std::strerror(rc);
      reset();
      return why;
    }
    // MAP_POPULATE: the page tables are filled now, not by faults during the first operations.
    void* p = ::mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_POPULATE, fd, 0);
    const int map_errno = errno;
    ::close(fd);
    if (p == MAP_FAILED) {
      reset();
      return std::string("mmap of the shared-memory region failed: ") + std::strerror(map_errno);
    }
    base_ = static_cast<std::uint8_t*>(p);
    bytes_ = bytes;
    slots_ = slots;
    slot_bytes_ = slot_bytes;
    return {};
  }

  // The receiver's side: maps `name` (as offered by the sender) read-only after checking it is a regular file
  // of this user, mode 0600 and exactly `slots * slot_bytes` long; unlinks the name. "" on success.
  std::string open(const std::string& dir, const std::string& name, std::size_t slots, std::size_t slot_bytes) {
    return map_existing(dir, name, slots, slot_bytes, false);
  }

  // Another rank's side of a region that a whole host shares (`host_arena`): the same checks, mapped read-write,
  // and the name is left for its creator to remove once every rank holds the region. "" on success.
  std::string open_shared(const std::string& dir, const std::string& name, std::size_t bytes) {
    return map_existing(dir, name, 1, bytes, true);
  }

  // The receiver's side when it declines an offer without opening it: the name must still go.
  static void discard(const std::string& dir, const std::string& name) {
    if (valid_shm_name(name)) ::unlink((dir + "/" + name).c_str());
  }

  // Removes the name (the mapping stays); idempotent.
  void unlink() {
    if (!path_.empty()) ::unlink(path_.c_str());
    path_.clear();
  }

  void reset() {
    unlink();
    if (base_) ::munmap(base_, bytes_);
    base_ = nullptr;
    bytes_ = slots_ = slot_bytes_ = 0;
    name_.clear();
  }

  [[nodiscard]] explicit operator bool() const { return base_ != nullptr; }
  [[nodiscard]] std::uint8_t* slot(std::size_t i) const { return base_ + (i % slots_) * slot_bytes_; }
  [[nodiscard]] std::uint8_t* data() const { return base_; }
  [[nodiscard]] std::size_t size() const { return bytes_; }
  [[nodiscard]] std::size_t slots() const { return slots_; }
  [[nodiscard]] std::size_t slot_bytes() const { return slot_bytes_; }
  [[nodiscard]] const std::string& name() const { return name_; }

 private:
  std::string map_existing(const std::string& dir, const std::string& name, std::size_t slots, std::size_t slot_bytes,
                           bool writable) {
    reset();
    if (!valid_shm_name(name)) return "malformed shared-memory name";
    const std::string path = dir + "/" + name;
    const int fd = ::open(path.c_str(), (writable ? O_RDWR : O_RDONLY) | O_NOFOLLOW | O_CLOEXEC);
    if (fd < 0) return "cannot open " + path + ": " + std::strerror(errno);
    // A link's two ends both hold it now (or this side gives up): the name has done its job.
    if (!writable) ::unlink(path.c_str());
    struct stat st {};
    const std::size_t bytes = slots * slot_bytes;
    std::string why;
    if (::fstat(fd, &st) != 0) why = std::string("fstat: ") + std::strerror(errno);
    else if (!S_ISREG(st.st_mode) || st.st_uid != ::geteuid() || (st.st_mode & 0777) != 0600)
      why = path + " is not a 0600 file of this user";
    else if (static_cast<std::size_t>(st.st_size) != bytes)
      why = path + " holds " + std::to_string(st.st_size) + " bytes, expected " + std::to_string(bytes);
    if (!why.empty()) {
      ::close(fd);
      return why;
    }
    const int prot = writable ? PROT_READ | PROT_WRITE : PROT_READ;
    void* p = ::mmap(nullptr, bytes, prot, MAP_SHARED | MAP_POPULATE, fd, 0);
    const int map_errno = errno;
    ::close(fd);
    if (p == MAP_FAILED) return std::string("mmap of the shared-memory region failed: ") + std::strerror(map_errno);
    base_ = static_cast<std::uint8_t*>(p);
    bytes_ = bytes;
    slots_ = slots;
    slot_bytes_ = slot_bytes;
    return {};
  }

  std::uint8_t* base_ = nullptr;
  std::size_t bytes_ = 0, slots_ = 0, slot_bytes_ = 0;
  std::string path_;  // set while this side still owns the name
  std::string name_;
};

}  // namespace mwstrat::detail
