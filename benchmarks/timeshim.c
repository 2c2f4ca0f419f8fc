/* Runs a distributor and appends its wall time, in seconds, to a log: the distributor's own
 * share of a link, measured apart from LLD's, which varies from link to link by more than a
 * large program's whole full hit costs. For benchmarks only (floor_bench.py compiles it).
 *
 *     timeshim LOG PROGRAM [ARGS...]
 *
 * Exits with the program's status; its own cost (one small exec) is the same for every
 * distributor it wraps.
 */
#include <errno.h>
#include <spawn.h>
#include <stdio.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>

extern char **environ;

int main(int argc, char **argv) {
    if (argc < 3) {
        fprintf(stderr, "usage: timeshim LOG PROGRAM [ARGS...]\n");
        return 2;
    }
    struct timespec start, end;
    clock_gettime(CLOCK_MONOTONIC, &start);
    pid_t pid;
    int rc = posix_spawn(&pid, argv[2], NULL, NULL, argv + 2, environ);
    if (rc != 0) {
        fprintf(stderr, "timeshim: %s: %s\n", argv[2], strerror(rc));
        return 127;
    }
    int status;
    while (waitpid(pid, &status, 0) < 0) {
        if (errno != EINTR) {
            perror("timeshim: waitpid");
            return 1;
        }
    }
    clock_gettime(CLOCK_MONOTONIC, &end);
    FILE *log = fopen(argv[1], "a");
    if (log != NULL) {
        double s = (double)(end.tv_sec - start.tv_sec) + (end.tv_nsec - start.tv_nsec) / 1e9;
        fprintf(log, "%.9f\n", s);
        fclose(log);
    }
    return WIFEXITED(status) ? WEXITSTATUS(status) : 1;
}
