/* mpi_datacheck: moves data through MPI and checks every byte it receives.
 *
 *   mpi_datacheck [--min-size BYTES] [--max-size BYTES] [--iters N]
 *
 * 1. point to point: each rank sends to rank+1 and receives from rank-1 (a ring), messages of
 *    --min-size (default 1 B), x4, ... and --max-size (default 64 MiB), contents a function of
 *    (sender, size, iteration, byte index), so a byte from the wrong message, the wrong offset
 *    or a stale buffer is caught. The same two buffers serve every message, refilled each time:
 *    what a registration cache keeps registered must still carry the new bytes;
 * 2. MPI_Allreduce (sum of int64) over 1, 1000 and 1M elements, exact results;
 * 3. one-sided, 1 KiB and 4 MiB windows, --iters rounds over the same window and origin buffer,
 *    refilled each round: MPI_Put of a pattern into rank+1's window, MPI_Get of it back, and
 *    MPI_Accumulate (MPI_SUM of int64) from every rank, each once synchronised with fences and
 *    once with passive-target MPI_Win_lock/MPI_Win_unlock (and a barrier for the target).
 *
 * Prints "mpi_datacheck: rank R ok (...)" per rank; on the first wrong byte prints where it is
 * and aborts with exit code 3. Used by the stack tests (tests/stacks_mpi.rs) and meant to be
 * reused by anything that must prove MPI moved the right bytes (e.g. through a bounce buffer).
 */
#include <mpi.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int rank, size;

static unsigned char pattern(int src, size_t len, int iter, size_t i) {
    uint64_t x = (uint64_t)src * 0x9e3779b97f4a7c15ull ^ (uint64_t)len * 0xbf58476d1ce4e5b9ull ^
                 (uint64_t)iter * 0x94d049bb133111ebull ^ (uint64_t)i * 0x2545f4914f6cdd1dull;
    x ^= x >> 29;
    return (unsigned char)(x ^ (x >> 17) ^ (i & 0xff));
}

static void fill(unsigned char *b, int src, size_t len, int iter) {
    for (size_t i = 0; i < len; i++) b[i] = pattern(src, len, iter, i);
}

static void check(const unsigned char *b, int src, size_t len, int iter, const char *what) {
    for (size_t i = 0; i < len; i++) {
        unsigned char want = pattern(src, len, iter, i);
        if (b[i] != want) {
            fprintf(stderr, "mpi_datacheck: rank %d: %s of %zu bytes from rank %d (iteration %d): byte %zu is 0x%02x, expected 0x%02x\n",
                    rank, what, len, src, iter, i, b[i], want);
            MPI_Abort(MPI_COMM_WORLD, 3);
        }
    }
}

static void point_to_point(size_t min, size_t max, int iters) {
    int to = (rank + 1) % size, from = (rank + size - 1) % size;
    unsigned char *sbuf = malloc(max ? max : 1), *rbuf = malloc(max ? max : 1);
    int n = 0;
    for (size_t len = min; len <= max; len = len < max && len * 4 > max ? max : len * 4) {
        for (int it = 0; it < iters; it++) {
            fill(sbuf, rank, len, it);
            memset(rbuf, 0xa5, len);
            MPI_Sendrecv(sbuf, (int)len, MPI_BYTE, to, it, rbuf, (int)len, MPI_BYTE, from, it, MPI_COMM_WORLD,
                         MPI_STATUS_IGNORE);
            check(rbuf, from, len, it, "send/recv");
            n++;
        }
    }
    free(sbuf);
    free(rbuf);
    printf("mpi_datacheck: rank %d send/recv %d messages up to %zu bytes ok\n", rank, n, max);
}

static void allreduce(void) {
    const int counts[] = {1, 1000, 1 << 20};
    for (int c = 0; c < 3; c++) {
        int n = counts[c];
        int64_t *in = malloc(n * sizeof *in), *out = malloc(n * sizeof *out);
        for (int i = 0; i < n; i++) in[i] = (int64_t)(rank + 1) * (i + 1) + ((int64_t)rank << 40);
        MPI_Allreduce(in, out, n, MPI_INT64_T, MPI_SUM, MPI_COMM_WORLD);
        int64_t rsum = (int64_t)size * (size + 1) / 2, shift = ((int64_t)size * (size - 1) / 2) << 40;
        for (int i = 0; i < n; i++) {
            int64_t want = rsum * (i + 1) + shift;
            if (out[i] != want) {
                fprintf(stderr, "mpi_datacheck: rank %d: allreduce of %d elements: element %d is %lld, expected %lld\n",
                        rank, n, i, (long long)out[i], (long long)want);
                MPI_Abort(MPI_COMM_WORLD, 3);
            }
        }
        free(in);
        free(out);
    }
    printf("mpi_datacheck: rank %d allreduce ok\n", rank);
}

/* Puts my pattern into rank+1's window and gets it back; with `passive`, under
 * MPI_Win_lock/unlock of the target and a barrier so the target may look, else with fences. */
static void put_get(MPI_Win win, unsigned char *win_buf, unsigned char *local, size_t len, int iter, int passive) {
    int to = (rank + 1) % size, from = (rank + size - 1) % size;
    const char *how = passive ? "lock/unlock" : "fence";
    char what[96];
    fill(local, rank, len, iter);
    if (passive) {
        MPI_Win_lock(MPI_LOCK_EXCLUSIVE, to, 0, win);
        MPI_Put(local, (int)len, MPI_BYTE, to, 0, (int)len, MPI_BYTE, win);
        MPI_Win_unlock(to, win);
        MPI_Barrier(MPI_COMM_WORLD);
    } else {
        MPI_Put(local, (int)len, MPI_BYTE, to, 0, (int)len, MPI_BYTE, win);
        MPI_Win_fence(0, win);
    }
    snprintf(what, sizeof what, "MPI_Put (%s) into my window", how);
    check(win_buf, from, len, iter, what);
    /* my window holds from's pattern; the next rank's window holds mine: read it back */
    memset(local, 0x5a, len);
    if (passive) {
        MPI_Win_lock(MPI_LOCK_SHARED, to, 0, win);
        MPI_Get(local, (int)len, MPI_BYTE, to, 0, (int)len, MPI_BYTE, win);
        MPI_Win_unlock(to, win);
    } else {
        MPI_Get(local, (int)len, MPI_BYTE, to, 0, (int)len, MPI_BYTE, win);
        MPI_Win_fence(0, win);
    }
    snprintf(what, sizeof what, "MPI_Get (%s) from the next rank's window", how);
    check(local, rank, len, iter, what);
}

/* Every rank adds (rank+1)*(i+1)+iter to element i of every window; the target checks the sum. */
static void accumulate(MPI_Win win, int64_t *win_buf, int64_t *local, size_t n, int iter, int passive) {
    for (size_t i = 0; i < n; i++) win_buf[i] = (int64_t)i << 20;
    for (size_t i = 0; i < n; i++) local[i] = (int64_t)(rank + 1) * (int64_t)(i + 1) + iter;
    if (passive) {
        MPI_Barrier(MPI_COMM_WORLD); /* every window is reset before anyone adds */
        for (int t = 0; t < size; t++) {
            MPI_Win_lock(MPI_LOCK_SHARED, t, 0, win);
            MPI_Accumulate(local, (int)n, MPI_INT64_T, t, 0, (int)n, MPI_INT64_T, MPI_SUM, win);
            MPI_Win_unlock(t, win);
        }
        MPI_Barrier(MPI_COMM_WORLD);
    } else {
        MPI_Win_fence(0, win);
        for (int t = 0; t < size; t++)
            MPI_Accumulate(local, (int)n, MPI_INT64_T, t, 0, (int)n, MPI_INT64_T, MPI_SUM, win);
        MPI_Win_fence(0, win);
    }
    int64_t rsum = (int64_t)size * (size + 1) / 2;
    for (size_t i = 0; i < n; i++) {
        int64_t want = ((int64_t)i << 20) + rsum * (int64_t)(i + 1) + (int64_t)size * iter;
        if (win_buf[i] != want) {
            fprintf(stderr, "mpi_datacheck: rank %d: MPI_Accumulate (%s) of %zu int64, iteration %d: element %zu is %lld, expected %lld\n",
                    rank, passive ? "lock/unlock" : "fence", n, iter, i, (long long)win_buf[i], (long long)want);
            MPI_Abort(MPI_COMM_WORLD, 3);
        }
    }
}

static void one_sided(int iters) {
    const size_t lens[] = {1024, 4 << 20};
    for (int k = 0; k < 2; k++) {
        size_t len = lens[k];
        unsigned char *win_buf, *local = malloc(len);
        MPI_Win win;
        MPI_Win_allocate((MPI_Aint)len, 1, MPI_INFO_NULL, MPI_COMM_WORLD, &win_buf, &win);
        memset(win_buf, 0, len);
        MPI_Win_fence(0, win);
        for (int it = 0; it < iters; it++) {
            for (int passive = 0; passive < 2; passive++) {
                int iter = 100 + 10 * k + 2 * it + passive;
                put_get(win, win_buf, local, len, iter, passive);
                MPI_Win_fence(0, win);
                accumulate(win, (int64_t *)win_buf, (int64_t *)local, len / 8, iter, passive);
                MPI_Win_fence(0, win);
            }
        }
        MPI_Win_free(&win);
        free(local);
    }
    printf("mpi_datacheck: rank %d put/get/accumulate (fence, lock/unlock) ok\n", rank);
}

int main(int argc, char **argv) {
    size_t min = 1, max = 64u << 20;
    int iters = 2;
    MPI_Init(&argc, &argv);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--min-size") && i + 1 < argc) min = strtoull(argv[++i], NULL, 0);
        else if (!strcmp(argv[i], "--max-size") && i + 1 < argc) max = strtoull(argv[++i], NULL, 0);
        else if (!strcmp(argv[i], "--iters") && i + 1 < argc) iters = atoi(argv[++i]);
        else {
            if (rank == 0) fprintf(stderr, "usage: mpi_datacheck [--min-size BYTES] [--max-size BYTES] [--iters N]\n");
            MPI_Abort(MPI_COMM_WORLD, 2);
        }
    }
    if (min < 1 || min > max) {
        if (rank == 0) fprintf(stderr, "mpi_datacheck: --min-size must be 1 .. --max-size\n");
        MPI_Abort(MPI_COMM_WORLD, 2);
    }
    point_to_point(min, max, iters);
    allreduce();
    one_sided(iters);
    MPI_Barrier(MPI_COMM_WORLD);
    printf("mpi_datacheck: rank %d ok\n", rank);
    MPI_Finalize();
    return 0;
}
