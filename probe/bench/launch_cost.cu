/*
 * launch_cost.cu — what one CUDA kernel launch costs, on the host and end to end, so that the
 * cost of tracing launches (CUPTI) can be read as nanoseconds per launch. The kernel is empty
 * (1 block of 32 threads, one int argument), launched with <<<>>> on a non-blocking stream.
 * After 2000 warm-up launches it measures:
 *
 *   issue         host nanoseconds per launch call: clock_gettime(CLOCK_MONOTONIC) around each
 *                 burst of B launches, the cudaStreamSynchronize that follows a burst untimed
 *                 (B is small enough that the launch queue never fills and blocks the host);
 *   back-to-back  wall nanoseconds per kernel for bursts of B launches including the synchronize
 *                 at the end of each burst: the GPU side of a launch as well as the host's.
 *
 * Each measure covers N launches in bursts of B and is repeated R times; it prints the median and
 * the min/max over the repetitions, one line per measure, then one JSON line with all of them.
 *
 *     launch_cost [--launches N] [--burst B] [--reps R]     (defaults 100000, 200, 7)
 *
 * What tracing costs is the difference between runs of the same binary:
 *
 *     build/bench/launch_cost                                    # plain
 *     ampprobe run --trace cuda -- build/bench/launch_cost       # ampprobe's CUPTI capture
 *     CUDA_INJECTION64_PATH=build/bench/libcupti_floor.so build/bench/launch_cost
 *                                                                # CUPTI and nothing else
 *
 * The last one (probe/bench/cupti_floor.c) enables only CUPTI's kernel activity records (plus
 * the kinds named in CUPTI_FLOOR_KINDS) and counts them: the floor any CUPTI-based tracer pays.
 */
#include <cuda_runtime.h>

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define WARMUP_LAUNCHES 2000
#define MAX_REPS 1000

// Runs a CUDA runtime call; on failure prints the call and CUDA's message and exits 1.
#define CUDA_CHECK(call) cuda_check((call), #call)

static void cuda_check(cudaError_t err, const char *what) {
    if (err == cudaSuccess) return;
    fprintf(stderr, "launch_cost: %s: %s (%d)\n", what, cudaGetErrorString(err), (int)err);
    exit(1);
}

// The launched kernel: does nothing with its argument, so the launch is all there is.
__global__ void empty_kernel(int x) {
    (void)x;
}

static long long now_ns(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (long long)ts.tv_sec * 1000000000LL + ts.tv_nsec;
}

// Launches n kernels on the stream, back to back, without waiting.
static void launch_burst(cudaStream_t stream, long long n) {
    for (long long i = 0; i < n; i++)
        empty_kernel<<<1, 32, 0, stream>>>((int)i);
}

// Ends a burst: any launch error of the burst, then the wait for the GPU.
static void burst_end(cudaStream_t stream) {
    CUDA_CHECK(cudaGetLastError());
    CUDA_CHECK(cudaStreamSynchronize(stream));
}

// Ns per launch over `launches` launches in bursts of `burst`: host ns per launch call with each
// burst's sync untimed (issue), or wall ns per kernel with it (back to back).
static double measure(cudaStream_t stream, long long launches, long long burst, bool with_sync) {
    long long total_ns = 0;
    for (long long done = 0; done < launches;) {
        long long n = launches - done < burst ? launches - done : burst;
        long long t0 = now_ns();
        launch_burst(stream, n);
        if (with_sync) burst_end(stream);
        total_ns += now_ns() - t0;
        if (!with_sync) burst_end(stream);
        done += n;
    }
    return (double)total_ns / (double)launches;
}

static int compare_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

typedef struct summary {
    double median_ns, min_ns, max_ns;
} summary;

// Sorts v (n values) and summarises it; an even n gets the mean of the two middle values.
static summary summarise(double *v, int n) {
    qsort(v, (size_t)n, sizeof *v, compare_double);
    double median = n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
    return (summary){.median_ns = median, .min_ns = v[0], .max_ns = v[n - 1]};
}

static void usage(FILE *f) {
    fprintf(f,
            "usage: launch_cost [--launches N] [--burst B] [--reps R]\n"
            "\n"
            "Times an empty kernel's launch: host ns per launch call (issue) and wall ns per\n"
            "kernel with the synchronize of each burst included (back-to-back), after %d\n"
            "warm-up launches. Prints the median and min/max over the repetitions, then one\n"
            "JSON line.\n"
            "\n"
            "options:\n"
            "  --launches N  launches per measure and repetition (default 100000)\n"
            "  --burst B     launches between two synchronizes (default 200; keep it below\n"
            "                the launch queue's depth, about 1000, or issue times the waits)\n"
            "  --reps R      repetitions of each measure, 1 to %d (default 7)\n"
            "  -h, --help    this help\n",
            WARMUP_LAUNCHES, MAX_REPS);
}

// Reads flag's value as an integer in [lo, hi]; otherwise says which flag and value, exits 2.
static long long parse_count(const char *flag, const char *value, long long lo, long long hi) {
    char *end = NULL;
    errno = 0;
    long long v = strtoll(value, &end, 10);
    if (errno != 0 || end == value || *end != '\0' || v < lo || v > hi) {
        fprintf(stderr, "launch_cost: %s %s: expected an integer from %lld to %lld\n", flag, value,
                lo, hi);
        exit(2);
    }
    return v;
}

int main(int argc, char **argv) {
    long long launches = 100000, burst = 200;
    int reps = 7;
    for (int i = 1; i < argc; i++) {
        const char *flag = argv[i];
        if (strcmp(flag, "-h") == 0 || strcmp(flag, "--help") == 0) {
            usage(stdout);
            return 0;
        }
        bool takes_value = strcmp(flag, "--launches") == 0 || strcmp(flag, "--burst") == 0 ||
                           strcmp(flag, "--reps") == 0;
        if (!takes_value) {
            fprintf(stderr, "launch_cost: unknown option %s\n", flag);
            usage(stderr);
            return 2;
        }
        if (i + 1 >= argc) {
            fprintf(stderr, "launch_cost: %s needs a value\n", flag);
            return 2;
        }
        const char *value = argv[++i];
        if (strcmp(flag, "--launches") == 0)
            launches = parse_count(flag, value, 1, 1000000000LL);
        else if (strcmp(flag, "--burst") == 0)
            burst = parse_count(flag, value, 1, 1000000000LL);
        else
            reps = (int)parse_count(flag, value, 1, MAX_REPS);
    }

    CUDA_CHECK(cudaSetDevice(0));
    cudaDeviceProp prop;
    CUDA_CHECK(cudaGetDeviceProperties(&prop, 0));
    cudaStream_t stream;
    CUDA_CHECK(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));

    launch_burst(stream, WARMUP_LAUNCHES);
    burst_end(stream);

    static double issue_ns[MAX_REPS], b2b_ns[MAX_REPS];
    for (int r = 0; r < reps; r++) {
        issue_ns[r] = measure(stream, launches, burst, false);
        b2b_ns[r] = measure(stream, launches, burst, true);
    }
    summary issue = summarise(issue_ns, reps), b2b = summarise(b2b_ns, reps);

    printf("device: %s; %lld launches in bursts of %lld, %d repetitions\n", prop.name, launches,
           burst, reps);
    printf("issue:        median %9.1f ns per launch call (min %.1f, max %.1f)\n", issue.median_ns,
           issue.min_ns, issue.max_ns);
    printf("back-to-back: median %9.1f ns per kernel, syncs included (min %.1f, max %.1f)\n",
           b2b.median_ns, b2b.min_ns, b2b.max_ns);
    printf("{\"issue_ns_median\": %.1f, \"issue_ns_min\": %.1f, \"issue_ns_max\": %.1f, "
           "\"b2b_ns_median\": %.1f, \"b2b_ns_min\": %.1f, \"b2b_ns_max\": %.1f, "
           "\"launches\": %lld, \"burst\": %lld, \"reps\": %d}\n",
           issue.median_ns, issue.min_ns, issue.max_ns, b2b.median_ns, b2b.min_ns, b2b.max_ns,
           launches, burst, reps);

    CUDA_CHECK(cudaStreamDestroy(stream));
    return 0;
}
