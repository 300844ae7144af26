/* Open MPI side of the peer benchmark: the same sizes, timing rule and JSON lines as
 * perseus_collectives_bench, so bench/run_all.py can put them in one table.
 * Timing rule (every bench/peers/* script's; docs/PERFORMANCE.md): warm up, then k
 * back-to-back ops per sample with k calibrated so a sample lasts >= MIN_SAMPLE_S; per-op
 * time = max over ranks / k; median of SAMPLES samples. Build: mpicc -O2 -o mpi_collectives_bench
 * mpi_collectives_bench.c */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

static int cmp_double(const void* a, const void* b) {
  double x = *(const double*)a, y = *(const double*)b;
  return (x > y) - (x < y);
}

typedef enum { ALLREDUCE, ALLGATHER, BROADCAST, REDUCESCATTER } coll_t;
static const char* kNames[] = {"allreduce", "allgather", "broadcast", "reducescatter"};

/* bytes = per-rank buffer size S as nccl-tests defines it (total size for allgather and
 * reducescatter). */
static void run_once(coll_t c, float* in, float* out, size_t bytes, int size, int* counts) {
  size_t n = bytes / sizeof(float);
  switch (c) {
    case ALLREDUCE:
      MPI_Allreduce(in, out, (int)n, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
      break;
    case ALLGATHER:
      MPI_Allgather(in, (int)(n / size), MPI_FLOAT, out, (int)(n / size), MPI_FLOAT,
                    MPI_COMM_WORLD);
      break;
    case BROADCAST:
      MPI_Bcast(in, (int)n, MPI_FLOAT, 0, MPI_COMM_WORLD);
      break;
    case REDUCESCATTER:
      MPI_Reduce_scatter(in, out, counts, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
      break;
  }
}

static double bus_factor(coll_t c, int n) {
  if (c == ALLREDUCE) return 2.0 * (n - 1) / n;
  if (c == BROADCAST) return 1.0;
  return (double)(n - 1) / n;
}

/* BENCH_HUGEPAGES=1: buffers advised as transparent huge pages before their first touch, as
 * perseus_collectives_bench does under the same setting. */
static float* bench_alloc(size_t bytes) {
  const size_t huge = (size_t)2 << 20;
  bytes = (bytes + huge - 1) / huge * huge;
  float* p = aligned_alloc(huge, bytes);
  if (!p) {
    fprintf(stderr, "out of memory\n");
    exit(1);
  }
  if (getenv("BENCH_HUGEPAGES") && atoi(getenv("BENCH_HUGEPAGES")) != 0)
    madvise(p, bytes, MADV_HUGEPAGE);
  return p;
}

/* `only`: "all" or a comma-separated list of collectives. */
static int selected(const char* only, const char* name) {
  if (strcmp(only, "all") == 0) return 1;
  const size_t n = strlen(name);
  for (const char* p = only; (p = strstr(p, name)) != NULL; p += n) {
    if ((p == only || p[-1] == ',') && (p[n] == '\0' || p[n] == ',')) return 1;
  }
  return 0;
}

int main(int argc, char** argv) {
  MPI_Init(&argc, &argv);
  int rank, size;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  size_t max_bytes = (size_t)(argc > 1 ? atof(argv[1]) : 256) * 1024 * 1024;
  const char* only = argc > 2 ? argv[2] : "all";
  int samples = getenv("SAMPLES") ? atoi(getenv("SAMPLES")) : 11;
  double min_sample = getenv("MIN_SAMPLE_S") ? atof(getenv("MIN_SAMPLE_S")) : 0.02;
  float* in = bench_alloc(max_bytes + 64);
  float* out = bench_alloc(max_bytes + 64);
  int* counts = malloc(sizeof(int) * size);
  memset(in, 0, max_bytes + 64);
  memset(out, 0, max_bytes + 64);
  double* t = malloc(sizeof(double) * samples);
  for (int c = 0; c < 4; ++c) {
    if (!selected(only, kNames[c])) continue;
    for (size_t bytes = 4; bytes <= max_bytes; bytes *= 4) {
      size_t n = bytes / sizeof(float);
      if ((c == ALLGATHER || c == REDUCESCATTER) && n < (size_t)size) continue;
      if (c == ALLGATHER || c == REDUCESCATTER) n -= n % size;
      for (int r = 0; r < size; ++r) counts[r] = (int)(n / size);
      size_t eff = n * sizeof(float);
      for (size_t i = 0; i < n; ++i) in[i] = (float)(rank + 1);
      run_once(c, in, out, eff, size, counts);
      /* calibrate k on rank 0's timing, shared so all ranks loop the same count */
      long k = 1;
      for (;;) {
        MPI_Barrier(MPI_COMM_WORLD);
        double t0 = MPI_Wtime();
        for (long i = 0; i < k; ++i) run_once(c, in, out, eff, size, counts);
        double dt = MPI_Wtime() - t0;
        MPI_Bcast(&dt, 1, MPI_DOUBLE, 0, MPI_COMM_WORLD);
        if (dt >= min_sample || k >= (1L << 24)) break;
        k *= (dt > 0 ? (long)(min_sample / dt * 1.2) + 1 : 16);
        if (k < 2) k = 2;
      }
      for (int s = 0; s < samples; ++s) {
        MPI_Barrier(MPI_COMM_WORLD);
        double t0 = MPI_Wtime();
        for (long i = 0; i < k; ++i) run_once(c, in, out, eff, size, counts);
        double dt = (MPI_Wtime() - t0) / k, mx;
        MPI_Allreduce(&dt, &mx, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
        t[s] = mx;
      }
      /* correctness: allreduce result must be sum(1..size) */
      int wrong = 0;
      if (c == ALLREDUCE) {
        float expect = (float)size * (size + 1) / 2;
        for (size_t i = 0; i < n; ++i)
          if (out[i] != expect) {
            wrong = 1;
            break;
          }
      }
      qsort(t, samples, sizeof(double), cmp_double);
      double med = t[samples / 2];
      double algbw = eff / med / 1e9;
      if (rank == 0)
        printf(
            "{\"library\": \"openmpi\", \"collective\": \"%s\", \"ranks\": %d, \"bytes\": %zu, "
            "\"time_us\": %.4f, \"min_us\": %.4f, \"max_us\": %.4f, \"algbw_gbs\": %.4f, "
            "\"busbw_gbs\": %.4f, \"wrong\": %d}\n",
            kNames[c], size, eff, med * 1e6, t[0] * 1e6, t[samples - 1] * 1e6, algbw,
            algbw * bus_factor((coll_t)c, size), wrong);
      fflush(stdout);
    }
  }
  free(in);
  free(out);
  free(counts);
  free(t);
  MPI_Finalize();
  return 0;
}
