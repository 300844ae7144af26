// A sampling profiler to preload where perf cannot run (no perf binary, or perf_event_open
// refused in a container): a wall-clock timer at SAMPLER_HZ (default 4000) interrupts the main
// thread, and each sample is its call stack (glibc backtrace, up to kDepth frames). The
// timer signals a real-time signal, not SIGPROF: importing torch resets SIGPROF's handler,
// and a SIGPROF with no handler kills the process.
// At exit it writes the stacks and /proc/self/maps to SAMPLER_OUT.<pid>, in each process that
// took samples (a launcher's, or a shim's such as pyenv's, is another process), with the
// process's CPU time; sampler_report.py symbolizes the busiest one with addr2line.
//
//   cc -O2 -shared -fPIC -o sampler.so bench/probes/sampler.c -lrt
//   SAMPLER_OUT=/tmp/prof LD_PRELOAD=$PWD/sampler.so ./program
//   python3 bench/probes/sampler_report.py /tmp/prof
//
// backtrace() from a signal handler is safe enough for a benchmark: it is primed at load (its
// first call loads libgcc), and the profiled loop throws no exceptions, whose unwinding would
// hold the lock it takes.
#define _GNU_SOURCE
#include <execinfo.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <time.h>
#include <ucontext.h>
#include <unistd.h>

#ifndef sigev_notify_thread_id
#define sigev_notify_thread_id _sigev_un._tid
#endif

enum { kDepth = 24, kMaxSamples = 1 << 18 };

static void* samples[kMaxSamples][kDepth];
static int depths[kMaxSamples];
static atomic_int taken;
static timer_t timer;
static pid_t profiled;       // forked children inherit the exit handler, not the timer
static char out_path[4096];  // SAMPLER_OUT

static void onSample(int sig, siginfo_t* info, void* context) {
  (void)sig;
  (void)info;
  int i = atomic_fetch_add(&taken, 1);
  if (i >= kMaxSamples) return;
  // Frame 0 is the interrupted instruction: backtrace() from here starts in this handler and
  // the signal trampoline, and may miss the leaf of a function without unwind info.
  ucontext_t* uc = (ucontext_t*)context;
  samples[i][0] = (void*)uc->uc_mcontext.gregs[REG_RIP];
  void* stack[kDepth + 2];
  int n = backtrace(stack, kDepth + 2);
  int d = 1;
  for (int k = 2; k < n && d < kDepth; ++k) samples[i][d++] = stack[k];
  depths[i] = d;
}

static void writeOut(void) {
  if (getpid() != profiled) return;
  if (timer != NULL) timer_delete(timer);
  timer = NULL;
  int n = atomic_load(&taken);
  if (n > kMaxSamples) n = kMaxSamples;
  if (n == 0) return;
  char path[sizeof out_path + 16];
  snprintf(path, sizeof path, "%s.%d", out_path, (int)profiled);
  FILE* f = fopen(path, "w");
  if (f == NULL) return;
  struct timespec cpu;
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &cpu);
  fprintf(f, "samples %d cpu_s %.3f\n", n, (double)cpu.tv_sec + 1e-9 * (double)cpu.tv_nsec);
  for (int i = 0; i < n; ++i) {
    fprintf(f, "s");
    for (int k = 0; k < depths[i]; ++k) fprintf(f, " %p", samples[i][k]);
    fprintf(f, "\n");
  }
  FILE* maps = fopen("/proc/self/maps", "r");
  char line[4096];
  while (maps != NULL && fgets(line, sizeof line, maps) != NULL) fprintf(f, "m %s", line);
  if (maps != NULL) fclose(maps);
  fclose(f);
}

__attribute__((constructor)) static void start(void) {
  const char* path = getenv("SAMPLER_OUT");
  if (path == NULL || strlen(path) >= sizeof out_path) return;
  strcpy(out_path, path);
  profiled = getpid();
  void* prime[2];
  backtrace(prime, 2);
  struct sigaction sa;
  memset(&sa, 0, sizeof sa);
  sa.sa_sigaction = onSample;
  sa.sa_flags = SA_SIGINFO | SA_RESTART;
  const int signo = SIGRTMIN + 5;
  sigaction(signo, &sa, NULL);
  const char* hz_text = getenv("SAMPLER_HZ");
  long hz = hz_text != NULL ? atol(hz_text) : 4000;
  if (hz <= 0) hz = 4000;
  struct sigevent ev;
  memset(&ev, 0, sizeof ev);
  // The thread that loads this (the main thread) on a wall clock: a CPU-time timer fires only
  // at the kernel's tick (250 Hz on many kernels), and a signal to the process goes to any
  // thread, an idle one too. The loops it profiles keep the main thread running.
  ev.sigev_notify = SIGEV_THREAD_ID;
  ev.sigev_notify_thread_id = (pid_t)syscall(SYS_gettid);
  ev.sigev_signo = signo;
  if (timer_create(CLOCK_MONOTONIC, &ev, &timer) != 0) return;
  const long ns = 1000000000L / hz;
  struct itimerspec every = {{0, ns}, {0, ns}};
  timer_settime(timer, 0, &every, NULL);
  atexit(writeOut);
}
