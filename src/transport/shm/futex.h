// Futex wait/wake on a 32-bit word that may live in memory shared between processes.
// The calls use the shared (non-PRIVATE) futex ops, so a waiter in one process is woken by a
// waker in another process that maps the same page.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>

namespace perseus::transport::shm {

static_assert(sizeof(std::atomic<uint32_t>) == sizeof(uint32_t) &&
                  std::atomic<uint32_t>::is_always_lock_free,
              "futex words must be plain lock-free 32-bit atomics");

// Sleeps while *word == expected, for at most `timeout`. Returns on a wake, on a value change,
// on a signal or on the timeout; the caller re-checks its condition in every case.
void futexWait(std::atomic<uint32_t>* word, uint32_t expected, std::chrono::microseconds timeout);

// Wakes every waiter on `word`.
void futexWakeAll(std::atomic<uint32_t>* word);

}  // namespace perseus::transport::shm
