/* cached-dist-client: hands a link to a running `cached-dist serve`, or runs cached-dist.
 *
 * usage (what LLD runs): cached-dist-client CACHED_DIST [ARGS...] JOBFILE
 *
 * Starting a Python interpreter costs a fully cached link more than its own work does; a
 * warm server (cached_dist/serve/server.py) has every module a full hit needs imported and
 * forks a child per link. This client passes the child what a process of its own would have
 * (standard streams and working directory as file descriptors, arguments, environment,
 * umask) and relays the outcome:
 *
 *   client -> server  "CDS1", u32 payload length, payload: umask in octal, NUL, the ignored
 *                     signals (a decimal bit mask: 1 << SIGHUP...), NUL, the argument count,
 *                     NUL, each argument (CACHED_DIST first) and NUL, each environment entry
 *                     and NUL
 *   server -> client  'A' + u32 child pid (connect, request and 'A' within ACCEPT_MS, or
 *                     the client gives up: a full queue or a stuck server never hangs a link)
 *   client -> server  'D' with fds 0, 1, 2 and the working directory attached (SCM_RIGHTS)
 *                     'F'                     not a full hit, or cannot serve: run CACHED_DIST
 *                     'E' + u32 length + text  the same, and the remotes that failed in the
 *                                              child's attempt (a line each), passed to
 *                                              CACHED_DIST in CACHED_DIST_FAILED_REMOTES so
 *                                              that it does not wait for them again
 *                     'R'                     a full hit, about to write outputs: 'G' to go
 *   client -> server  'G'                     (sent only by a client still waiting)
 *   server -> client  'S' + status byte       done: exit with it
 *
 * Anything else (no server, a server of another user, a timeout, a child that dies before
 * 'S') runs CACHED_DIST [ARGS...] JOBFILE in this process (exec), which does the whole link as
 * if no server existed. When no server listens at the socket at all (nothing there, or a
 * socket a server left), it runs with CACHED_DIST_AUTOSTART=1, and cached-dist starts one
 * once the link is done (cached_dist/serve/autostart.py): the next link is served. Not when
 * a server answered (it hands back what it cannot serve), nor for one of another user. Because a child writes nothing before the client's 'G', and a client
 * that gave up never sends it, the two never both write a link's outputs. The descriptors
 * go only to a child that answered: in a stuck server's queue they would keep the link's
 * output pipes open (a build tool waits for their end) long after the link is over.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <time.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

extern char **environ;

#define ACCEPT_MS 2000             /* a server that does not fork a child by then is stuck */
#define MAX_PAYLOAD (8u << 20)     /* arguments and environment; more: run it here */

static volatile pid_t child_pid; /* the server's child serving this link, once known */
static int no_server;            /* connect found no server listening: start one (above) */
#define AUTOSTART "CACHED_DIST_AUTOSTART"
#define FAILED_REMOTES "CACHED_DIST_FAILED_REMOTES" /* cached_dist/link/tiers.py FAILED_ENV */
#define MAX_FAILED 65536u                            /* longer: not passed on */

/* The signals a child is sent when this process gets them, unless this process ignores them
 * (as under nohup): then it ignores them as cached-dist would have, and so does the child. */
static const int FORWARDED[] = {SIGHUP, SIGINT, SIGQUIT, SIGTERM};
#define N_FORWARDED (sizeof FORWARDED / sizeof *FORWARDED)
static struct sigaction original[N_FORWARDED]; /* read first thing in main */
static unsigned long ignored;                     /* bit 1 << sig: ignored on entry */

/* Ctrl-C and friends reach the process that does the work, then this one as usual. */
static void forward(int sig) {
    int saved = errno;
    if (child_pid > 0)
        kill(child_pid, sig);
    signal(sig, SIG_DFL);
    raise(sig);
    errno = saved;
}

static void read_dispositions(void) {
    for (size_t i = 0; i < N_FORWARDED; i++) {
        if (sigaction(FORWARDED[i], NULL, &original[i]) != 0) {
            original[i].sa_handler = SIG_IGN; /* unknown: leave it alone */
            continue;
        }
        if (original[i].sa_handler == SIG_IGN)
            ignored |= 1ul << FORWARDED[i];
    }
}

static long now_ms(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (long)t.tv_sec * 1000 + t.tv_nsec / 1000000;
}

/* Waits for fd to be ready for events until deadline (ms, now_ms; -1: no limit). */
static int ready(int fd, short events, long deadline) {
    for (;;) {
        int wait = -1;
        if (deadline >= 0) {
            long left = deadline - now_ms();
            if (left <= 0)
                return -1;
            wait = (int)left;
        }
        struct pollfd pfd = {.fd = fd, .events = events};
        int r = poll(&pfd, 1, wait);
        if (r > 0)
            return 0;
        if (r < 0 && errno != EINTR)
            return -1;
    }
}

static int socket_path(char *out, size_t cap) {
    const char *given = getenv("CACHED_DIST_SOCKET");
    const char *runtime = getenv("XDG_RUNTIME_DIR");
    int n;
    if (given && *given)
        n = snprintf(out, cap, "%s", given);
    else if (runtime && *runtime == '/')
        n = snprintf(out, cap, "%s/cached-dist.sock", runtime);
    else
        n = snprintf(out, cap, "/tmp/cached-dist-%lu/server.sock", (unsigned long)getuid());
    return n > 0 && (size_t)n < cap ? 0 : -1;
}

struct buf {
    char *v;
    size_t n, cap;
};

static int put(struct buf *b, const char *s, size_t len) {
    if (len > MAX_PAYLOAD || b->n + len > MAX_PAYLOAD)
        return -1;
    if (b->n + len > b->cap) {
        size_t cap = b->cap ? b->cap : 4096;
        while (cap < b->n + len)
            cap *= 2;
        char *v = realloc(b->v, cap);
        if (!v)
            return -1;
        b->v = v;
        b->cap = cap;
    }
    memcpy(b->v + b->n, s, len);
    b->n += len;
    return 0;
}

static int put_str(struct buf *b, const char *s) { return put(b, s, strlen(s) + 1); }

/* Reads exactly n bytes by deadline (-1: no limit). 0 on success. */
static int read_exact(int fd, void *to, size_t n, long deadline) {
    char *p = to;
    while (n) {
        if (ready(fd, POLLIN, deadline))
            return -1;
        ssize_t got = recv(fd, p, n, MSG_DONTWAIT);
        if (got < 0 && (errno == EINTR || errno == EAGAIN))
            continue;
        if (got <= 0)
            return -1;
        p += got;
        n -= (size_t)got;
    }
    return 0;
}

/* Writes all n bytes by deadline (-1: no limit). 0 on success. */
static int write_all(int fd, const void *from, size_t n, long deadline) {
    const char *p = from;
    while (n) {
        if (ready(fd, POLLOUT, deadline))
            return -1;
        ssize_t put_n = send(fd, p, n, MSG_NOSIGNAL | MSG_DONTWAIT);
        if (put_n < 0 && (errno == EINTR || errno == EAGAIN))
            continue;
        if (put_n <= 0)
            return -1;
        p += put_n;
        n -= (size_t)put_n;
    }
    return 0;
}

/* Sends the request by deadline; -1 if anything about it fails (the caller then runs the
 * link itself). */
static int send_request(int s, int argc, char **argv, long deadline) {
    struct buf b = {0};
    char text[32];
    mode_t mask = umask(0);
    umask(mask);
    snprintf(text, sizeof text, "%o", (unsigned)mask);
    int bad = put_str(&b, text);
    snprintf(text, sizeof text, "%lu", ignored);
    bad = bad || put_str(&b, text);
    snprintf(text, sizeof text, "%d", argc - 1);
    bad = bad || put_str(&b, text);
    for (int i = 1; i < argc && !bad; i++)
        bad = put_str(&b, argv[i]);
    for (char **e = environ; *e && !bad; e++)
        bad = put_str(&b, *e);
    char head[8] = {'C', 'D', 'S', '1'};
    uint32_t len = (uint32_t)b.n;
    memcpy(head + 4, &len, 4);
    bad = bad || write_all(s, head, sizeof head, deadline) || write_all(s, b.v, b.n, deadline);
    free(b.v);
    return bad ? -1 : 0;
}

/* Hands the accepting child this process's streams and working directory. */
static int send_descriptors(int s) {
    int cwd = open(".", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (cwd < 0)
        return -1;
    int fds[4] = {0, 1, 2, cwd};
    union {
        char space[CMSG_SPACE(sizeof fds)];
        struct cmsghdr align;
    } control;
    memset(&control, 0, sizeof control);
    char tag = 'D';
    struct iovec iov = {.iov_base = &tag, .iov_len = 1};
    struct msghdr m = {.msg_iov = &iov, .msg_iovlen = 1, .msg_control = control.space,
                       .msg_controllen = sizeof control.space};
    struct cmsghdr *c = CMSG_FIRSTHDR(&m);
    c->cmsg_level = SOL_SOCKET;
    c->cmsg_type = SCM_RIGHTS;
    c->cmsg_len = CMSG_LEN(sizeof fds);
    memcpy(CMSG_DATA(c), fds, sizeof fds);
    long deadline = now_ms() + ACCEPT_MS; /* once: a retry must not extend it */
    ssize_t sent = -1;
    while (!ready(s, POLLOUT, deadline)) {
        sent = sendmsg(s, &m, MSG_NOSIGNAL | MSG_DONTWAIT);
        if (sent >= 0 || (errno != EINTR && errno != EAGAIN))
            break;
    }
    close(cwd);
    return sent == 1 ? 0 : -1;
}

/* 'E': the remotes the child found failing, for the link run here (see the protocol above). */
static void pass_on_failed(int s) {
    uint32_t len;
    if (read_exact(s, &len, 4, -1) || len == 0 || len > MAX_FAILED)
        return;
    char *text = malloc(len + 1);
    if (!text)
        return;
    if (!read_exact(s, text, len, -1) && !memchr(text, 0, len)) {
        text[len] = 0;
        setenv(FAILED_REMOTES, text, 1);
    }
    free(text);
}

/* The whole exchange; returns the link's exit status, or -1 to run the link here. */
static int through_server(int argc, char **argv) {
    char path[sizeof(((struct sockaddr_un *)0)->sun_path)];
    if (socket_path(path, sizeof path))
        return -1;
    long deadline = now_ms() + ACCEPT_MS;
    /* Non-blocking: a full queue (a stuck server) is EAGAIN at once, not a wait. */
    int s = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
    if (s < 0)
        return -1;
    struct sockaddr_un addr = {.sun_family = AF_UNIX};
    memcpy(addr.sun_path, path, strlen(path) + 1);
    struct ucred peer;
    socklen_t peer_len = sizeof peer;
    if (connect(s, (struct sockaddr *)&addr, sizeof addr) < 0) {
        /* EAGAIN is a full queue (a server, stuck); EACCES and others, no place of ours */
        no_server = errno == ENOENT || errno == ECONNREFUSED;
        close(s);
        return -1;
    }
    if (getsockopt(s, SOL_SOCKET, SO_PEERCRED, &peer, &peer_len) < 0) {
        close(s);
        return -1;
    }
    if (peer.uid != getuid()) {
        fprintf(stderr, "cached-dist: warning: %s belongs to a server of user %lu, not "
                        "yours: not using it\n", path, (unsigned long)peer.uid);
        close(s);
        return -1;
    }
    char accepted[5];
    if (send_request(s, argc, argv, deadline) || read_exact(s, accepted, 5, deadline) ||
        accepted[0] != 'A' || send_descriptors(s)) {
        close(s);
        return -1;
    }
    uint32_t pid;
    memcpy(&pid, accepted + 1, 4);
    child_pid = (pid_t)pid;
    for (size_t i = 0; i < N_FORWARDED; i++)
        if (original[i].sa_handler != SIG_IGN)
            signal(FORWARDED[i], forward);
    char reply[2];
    int lost = read_exact(s, reply, 1, -1);
    if (!lost && reply[0] == 'E')
        pass_on_failed(s);
    if (lost || reply[0] != 'R' || write_all(s, "G", 1, -1) ||
        read_exact(s, reply, 2, -1) || reply[0] != 'S') {
        close(s); /* 'F' or 'E', or the child died: the link is done here, from the start */
        child_pid = 0;
        return -1;
    }
    close(s);
    return (unsigned char)reply[1];
}

int main(int argc, char **argv) {
    if (argc < 3) {
        fprintf(stderr, "cached-dist: error: usage: cached-dist-client CACHED_DIST [ARGS...] "
                        "JOBFILE (see `cached-dist flags`)\n");
        return 2;
    }
    read_dispositions();
    unsetenv(AUTOSTART); /* only this client says it, and never to a server's child */
    unsetenv(FAILED_REMOTES); /* only a child's 'E' says it */
    int status = through_server(argc, argv);
    if (status >= 0)
        return status;
    if (no_server)
        setenv(AUTOSTART, "1", 1);
    for (size_t i = 0; i < N_FORWARDED; i++) /* as they were: ignored ones stay ignored */
        if (original[i].sa_handler != SIG_IGN)
            sigaction(FORWARDED[i], &original[i], NULL);
    execvp(argv[1], argv + 1);
    fprintf(stderr, "cached-dist: error: cannot run %s: %s\n", argv[1], strerror(errno));
    return 127;
}
