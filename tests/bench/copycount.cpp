// copycount: an LD_PRELOAD library that counts the bytes a process copies with memcpy, memmove and
// mempcpy, for scripts/bench-peers' "bytes copied per message" (docs/performance.md).
//
//   COPYCOUNT_FILE=/tmp/counts LD_PRELOAD=build/tests/libcopycount.so build/broker/escrowd ...
//
// The counters live in COPYCOUNT_FILE (created, 64 bytes, mapped shared), so they can be read while
// the process runs, before and after a load: six native-endian u64, calls then bytes of memcpy,
// memmove and mempcpy (`od -An -t u8 FILE`). It sees every call made through the dynamic linker
// (the program's own, libstdc++'s, LMDB's, OpenSSL's); copies the compiler inlined (small fixed
// sizes) and glibc's calls to itself are not seen, so the figure is a lower bound. Not part of
// escrowd: a measuring tool only.
//
// With COPYCOUNT_CALLERS=FILE as well, the bytes are also summed by calling address, and at exit
// FILE gets one line per caller, "bytes calls module offset", for addr2line -f -C -e module offset.
//
// No libc header that declares memcpy is included here: these definitions are the ones the
// process gets.
#include <dlfcn.h>
#include <fcntl.h>
#include <link.h>
#include <sys/mman.h>
#include <unistd.h>

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <cstdlib>

namespace {

using copy_fn = void* (*)(void*, const void*, std::size_t);

struct counters {
  std::atomic<std::uint64_t> calls[3];
  std::atomic<std::uint64_t> bytes[3];
};
enum which { kMemcpy = 0, kMemmove = 1, kMempcpy = 2 };

counters* shared = nullptr;  // null until the constructor mapped COPYCOUNT_FILE
copy_fn real[3] = {nullptr, nullptr, nullptr};

// Bytes by calling address: open addressing, no allocation; a full table drops new callers.
struct caller_slot {
  std::atomic<std::uintptr_t> address;
  std::atomic<std::uint64_t> bytes;
  std::atomic<std::uint64_t> calls;
};
constexpr std::size_t kSlots = 1 << 14;
caller_slot* callers = nullptr;  // allocated by the constructor when COPYCOUNT_CALLERS is set
const char* callers_path = nullptr;

void count_caller(std::uintptr_t address, std::size_t n) {
  std::size_t i = (address * 0x9E3779B97F4A7C15ull) >> 50;
  for (std::size_t probe = 0; probe < 64; ++probe, i = (i + 1) & (kSlots - 1)) {
    std::uintptr_t seen = callers[i].address.load(std::memory_order_relaxed);
    if (seen == 0 && callers[i].address.compare_exchange_strong(seen, address)) seen = address;
    if (seen != address) continue;
    callers[i].bytes.fetch_add(n, std::memory_order_relaxed);
    callers[i].calls.fetch_add(1, std::memory_order_relaxed);
    return;
  }
}

// Before dlsym has found the real functions: a byte loop the compiler cannot turn into a call.
void* slow_move(void* dest, const void* src, std::size_t n) {
  volatile unsigned char* d = static_cast<unsigned char*>(dest);
  const volatile unsigned char* s = static_cast<const unsigned char*>(src);
  if (d < s) {
    for (std::size_t i = 0; i < n; ++i) d[i] = s[i];
  } else {
    for (std::size_t i = n; i > 0; --i) d[i - 1] = s[i - 1];
  }
  return dest;
}

void* copy(which w, void* dest, const void* src, std::size_t n, void* caller) {
  if (counters* c = shared) {
    c->calls[w].fetch_add(1, std::memory_order_relaxed);
    c->bytes[w].fetch_add(n, std::memory_order_relaxed);
  }
  if (callers) count_caller(reinterpret_cast<std::uintptr_t>(caller), n);
  copy_fn f = real[w];
  return f ? f(dest, src, n) : slow_move(dest, src, n);
}

__attribute__((constructor)) void start() {
  real[kMemcpy] = reinterpret_cast<copy_fn>(dlsym(RTLD_NEXT, "memcpy"));
  real[kMemmove] = reinterpret_cast<copy_fn>(dlsym(RTLD_NEXT, "memmove"));
  real[kMempcpy] = reinterpret_cast<copy_fn>(dlsym(RTLD_NEXT, "mempcpy"));
  callers_path = std::getenv("COPYCOUNT_CALLERS");
  if (callers_path) {
    void* p = ::mmap(nullptr, sizeof(caller_slot) * kSlots, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (p != MAP_FAILED) callers = static_cast<caller_slot*>(p);
  }
  const char* path = std::getenv("COPYCOUNT_FILE");
  if (!path) return;
  int fd = ::open(path, O_RDWR | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) return;
  if (::ftruncate(fd, sizeof(counters)) == 0) {
    void* p = ::mmap(nullptr, sizeof(counters), PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    if (p != MAP_FAILED) shared = static_cast<counters*>(p);
  }
  ::close(fd);
}

// Writes the callers table: each address as the module it is in and the offset within it.
__attribute__((destructor)) void write_callers() {
  if (!callers || !callers_path) return;
  int fd = ::open(callers_path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) return;
  for (std::size_t i = 0; i < kSlots; ++i) {
    std::uintptr_t address = callers[i].address.load();
    if (address == 0) continue;
    Dl_info info{};
    if (dladdr(reinterpret_cast<void*>(address), &info) == 0 || !info.dli_fname) continue;
    // Offsets for addr2line: relative to the load address of the module (0 for a fixed executable).
    std::uintptr_t base = reinterpret_cast<std::uintptr_t>(info.dli_fbase);
    char line[4096];
    int len = __builtin_snprintf(line, sizeof line, "%llu %llu %s 0x%llx\n",
                                 static_cast<unsigned long long>(callers[i].bytes.load()),
                                 static_cast<unsigned long long>(callers[i].calls.load()), info.dli_fname,
                                 static_cast<unsigned long long>(address - base - 1));
    if (len > 0) (void)!::write(fd, line, static_cast<std::size_t>(len) < sizeof line ? len : sizeof line - 1);
  }
  ::close(fd);
}

}  // namespace

extern "C" {
void* memcpy(void* dest, const void* src, std::size_t n) {
  return copy(kMemcpy, dest, src, n, __builtin_return_address(0));
}
void* memmove(void* dest, const void* src, std::size_t n) {
  return copy(kMemmove, dest, src, n, __builtin_return_address(0));
}
void* mempcpy(void* dest, const void* src, std::size_t n) {
  copy(kMempcpy, dest, src, n, __builtin_return_address(0));
  return static_cast<char*>(dest) + n;
}
}
