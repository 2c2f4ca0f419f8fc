/* cached-dist-guard: a job's process-group leader that ends the job when its link ends.
 *
 *   cached-dist-guard PARENT COMMAND [ARG...]
 *
 * The runners (cached_dist/runners/process.py) start every compiler and inner distributor
 * through it, as the leader of a process group of its own. It runs COMMAND as its child in
 * that group and exits as COMMAND did (the same status, or the same signal), so the link sees
 * what it would have seen of COMMAND itself.
 *
 * Should PARENT (the link, whose main thread started it) end without stopping the group
 * first, SIGKILL included, the kernel tells it (PR_SET_PDEATHSIG) and it stops the whole
 * group: SIGTERM (clang then removes its temporary files), SIGKILL 100 ms later. So no
 * compiler, nor anything an inner distributor started in its group, outlives the link by
 * more than that. PARENT is checked after the request, for a link that died before it.
 * The child itself dies with the guard (SIGKILL), should the guard be killed alone.
 *
 * Descriptor 3, when open, is where an exec failure is told: the errno, 4 bytes, written by
 * the child before it exits 127; it is closed (close-on-exec) when COMMAND starts.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define REPORT_FD 3
#define DEATH_SIGNAL SIGUSR1

/* What the guard ignores (its group is signalled as a whole; it relays what its child got),
 * restored in the child to what the guard was started with. */
static const int IGNORED[] = {SIGHUP, SIGINT, SIGQUIT, SIGTERM};
#define N_IGNORED (sizeof IGNORED / sizeof IGNORED[0])
static struct sigaction original[N_IGNORED];

static sigset_t started_mask; /* the signal mask the guard was started with */
static volatile sig_atomic_t orphaned = 0;

static void on_parent_death(int sig) {
    (void)sig;
    orphaned = 1;
}

static void on_child(int sig) { (void)sig; /* only wakes sigsuspend */ }

static void pause_ms(long ms) {
    struct timespec t = {ms / 1000, (ms % 1000) * 1000000L};
    while (nanosleep(&t, &t) != 0 && errno == EINTR) {
    }
}

/* The link is gone: stop everything in the group, this process last. */
_Noreturn static void stop_group(pid_t child) {
    kill(0, SIGTERM);
    for (int i = 0; i < 20 && child > 0; i++) {
        if (waitpid(child, NULL, WNOHANG) == child)
            break;
        pause_ms(5);
    }
    kill(0, SIGKILL);
    _exit(128 + SIGKILL);
}

static void tell(int error) {
    int fd = REPORT_FD;
    if (fcntl(fd, F_GETFD) == -1)
        return;
    ssize_t put;
    do
        put = write(fd, &error, sizeof error);
    while (put < 0 && errno == EINTR);
}

_Noreturn static void run_child(pid_t guard, char **argv) {
    struct sigaction dfl;
    memset(&dfl, 0, sizeof dfl);
    dfl.sa_handler = SIG_DFL;
    sigaction(DEATH_SIGNAL, &dfl, NULL);
    sigaction(SIGCHLD, &dfl, NULL);
    for (size_t i = 0; i < N_IGNORED; i++)
        sigaction(IGNORED[i], &original[i], NULL);
    sigprocmask(SIG_SETMASK, &started_mask, NULL);
    if (prctl(PR_SET_PDEATHSIG, SIGKILL) != 0 || getppid() != guard)
        _exit(127);
    execvp(argv[0], argv);
    tell(errno);
    _exit(127);
}

/* Ends this process as the child ended. */
_Noreturn static void relay(int status) {
    if (WIFEXITED(status))
        _exit(WEXITSTATUS(status));
    if (WIFSIGNALED(status)) {
        int sig = WTERMSIG(status);
        struct rlimit no_core = {0, 0};
        setrlimit(RLIMIT_CORE, &no_core);
        signal(sig, SIG_DFL);
        sigset_t one;
        sigemptyset(&one);
        sigaddset(&one, sig);
        sigprocmask(SIG_UNBLOCK, &one, NULL);
        kill(getpid(), sig);
        _exit(128 + sig);
    }
    _exit(127);
}

int main(int argc, char **argv) {
    if (argc < 3) {
        static const char usage[] = "usage: cached-dist-guard PARENT COMMAND [ARG...]\n";
        if (write(2, usage, sizeof usage - 1) < 0) {
        }
        return 2;
    }
    pid_t parent = (pid_t)strtol(argv[1], NULL, 10);
    (void)fcntl(REPORT_FD, F_SETFD, FD_CLOEXEC);

    /* Both signals stay blocked but in sigsuspend: none can come between a check and the wait. */
    sigset_t waited;
    sigemptyset(&waited);
    sigaddset(&waited, DEATH_SIGNAL);
    sigaddset(&waited, SIGCHLD);
    sigprocmask(SIG_BLOCK, &waited, &started_mask);
    struct sigaction ignore, death, child_ended;
    memset(&ignore, 0, sizeof ignore);
    ignore.sa_handler = SIG_IGN;
    for (size_t i = 0; i < N_IGNORED; i++)
        sigaction(IGNORED[i], &ignore, &original[i]);
    memset(&death, 0, sizeof death);
    death.sa_handler = on_parent_death;
    sigaction(DEATH_SIGNAL, &death, NULL);
    memset(&child_ended, 0, sizeof child_ended);
    child_ended.sa_handler = on_child;
    sigaction(SIGCHLD, &child_ended, NULL);
    if (parent > 0 && (prctl(PR_SET_PDEATHSIG, DEATH_SIGNAL) != 0 || getppid() != parent))
        stop_group(0);

    pid_t guard = getpid();
    pid_t child = fork();
    if (child < 0) {
        tell(errno);
        return 127;
    }
    if (child == 0)
        run_child(guard, argv + 2);
    close(REPORT_FD);

    sigset_t waiting = started_mask;
    sigdelset(&waiting, DEATH_SIGNAL);
    sigdelset(&waiting, SIGCHLD);
    int status;
    for (;;) {
        pid_t done = waitpid(child, &status, WNOHANG);
        if (done == child)
            break;
        if (done < 0 && errno != EINTR)
            _exit(127);
        if (orphaned)
            stop_group(child);
        if (done == 0)
            sigsuspend(&waiting);
    }
    if (orphaned)
        stop_group(0);
    relay(status);
}
