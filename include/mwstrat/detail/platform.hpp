#pragma once
// mwstrat runs on Linux only: the ring uses accept4 and /dev/shm, the host topology /proc and sched_getaffinity,
// atomic checkpoint writes sync_file_range. Say so at compile time instead of failing on a missing symbol.

#if !defined(__linux__)
#error "mwstrat supports Linux only (it uses accept4, /dev/shm, /proc and sync_file_range)"
#endif
