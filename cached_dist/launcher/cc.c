/* cached-dist-cc: a compiler launcher that keeps the checkout's path out of ThinLTO bitcode.
 *
 * usage: cached-dist-cc [--base-dir=DIR] [--prefix-map[=NAME]] [--print] COMPILER [ARGS...]
 *
 * clang records the source path as given in each module's source_filename, and ThinLTO derives
 * local symbols' GUIDs and the module hash from it: compiled by absolute path (as CMake always
 * does), the same sources in two checkouts give different bitcode, backend jobs and objects.
 * This launcher rewrites every absolute path under the base directory into one relative to
 * the compiler's working directory (as ccache's base_dir does), then execs COMPILER with the
 * rewritten arguments. It caches nothing: COMPILER may be another launcher (ccache, sccache),
 * whose compiler word is left alone too.
 *
 * Rewritten: positional arguments (the sources; a link's objects), the values of -I, -isystem,
 * -iquote, -idirafter, -include, -imacros, -o, -MF (joined or separate) and of
 * -fprofile-use=, -fprofile-instr-use=, -fprofile-sample-use=, -fprofile-list=,
 * -fprofile-remapping-file=, -fsanitize-ignorelist=, -fsanitize-blacklist= (read while
 * compiling). Never: -MT/-MQ (names of build-tool targets, not files clang reads),
 * --sysroot, *-generate= paths (used by the program at run time), @FILE response files, the
 * values of options that take one (-Xclang, -D, ...), anything outside the base directory, and
 * nothing at all when -working-directory is given. A path is rewritten only if the relative
 * one names the same file (same device and inode; for an output not written yet, the same
 * directory and name): otherwise it stays as it was, which can only cost sharing.
 *
 * The base directory: --base-dir, else $CACHED_DIST_BASE_DIR, else the checkout's top
 * directory: the nearest directory holding .git above the CMake source directory (when the
 * working directory is in a CMake build tree, found by its CMakeCache.txt) or above the working
 * directory; else that CMake source directory; else the working directory. It is looked for
 * only when some argument is an absolute path (or --prefix-map asks for it).
 *
 * --prefix-map[=NAME] adds -ffile-prefix-map=BASE=NAME (NAME default ".") to compiles (a
 * command with -c, -S or -E), for what stays absolute in debug information: the compiler's
 * working directory. --print writes the command it would run, quoted for a shell, and exits.
 *
 * Why C: it runs once per source file of a build; exec'ing this costs well under a millisecond,
 * a Python interpreter's start-up alone some 20 ms (benchmarks/launcher_bench.py).
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#define NAME "cached-dist-cc"
#define USAGE "usage: " NAME " [--base-dir=DIR] [--prefix-map[=NAME]] [--print] COMPILER [ARGS...]"
#define MAX_CACHE_FILE (16 << 20) /* a CMakeCache.txt larger than this is not read */

static int usage_error(const char *what, const char *arg) {
    fprintf(stderr, NAME ": error: %s%s%s (" USAGE ")\n", what, arg ? ": " : "", arg ? arg : "");
    return 2;
}

/* ---- paths --------------------------------------------------------------------------- */

/* The absolute path `in` without empty, "." and ".." components (lexically: a "..", a symlink
 * notwithstanding, removes the component before it; same_file() checks the result). Returns
 * 0 if it does not fit in PATH_MAX. */
static int normalize(const char *in, char *out) {
    size_t n = 0;
    const char *p = in;
    while (*p) {
        while (*p == '/')
            p++;
        const char *start = p;
        while (*p && *p != '/')
            p++;
        size_t len = (size_t)(p - start);
        if (len == 0 || (len == 1 && start[0] == '.'))
            continue;
        if (len == 2 && start[0] == '.' && start[1] == '.') {
            while (n > 0 && out[n - 1] != '/')
                n--;
            if (n > 0)
                n--; /* the slash before it */
            continue;
        }
        if (n + 1 + len >= PATH_MAX)
            return 0;
        out[n++] = '/';
        memcpy(out + n, start, len);
        n += len;
    }
    if (n == 0)
        out[n++] = '/';
    out[n] = '\0';
    return 1;
}

/* Whether the normalized `path` is `dir` or below it. */
static int under(const char *path, const char *dir) {
    size_t len = strlen(dir);
    return strncmp(path, dir, len) == 0 && (path[len] == '\0' || path[len] == '/');
}

/* `target` relative to `from` (both normalized, absolute) into `out`; 0 if it does not fit. */
static int relative(const char *target, const char *from, char *out) {
    size_t i = 0, common = 0;
    for (;; i++) {
        char a = target[i], b = from[i];
        int end_a = a == '\0' || a == '/', end_b = b == '\0' || b == '/';
        if (end_a && end_b) {
            common = i;
            if (a == '\0' || b == '\0')
                break;
        } else if (a != b) {
            break;
        }
    }
    size_t n = 0;
    for (const char *p = from + common; *p; p++) {
        if (*p != '/' || p[1] == '\0') /* a component starts after each slash (not the root's) */
            continue;
        if (n + 3 >= PATH_MAX)
            return 0;
        memcpy(out + n, "../", 3);
        n += 3;
    }
    const char *rest = target + common;
    if (*rest == '/')
        rest++;
    size_t len = strlen(rest);
    if (n + len >= PATH_MAX)
        return 0;
    memcpy(out + n, rest, len);
    n += len;
    if (n == 0)
        out[n++] = '.';
    else if (len == 0)
        n--; /* "../../" -> "../.." */
    out[n] = '\0';
    return 1;
}

/* The directory part of `path` ("." for a bare name) and its last component. */
static void split(const char *path, char *dir, const char **name) {
    const char *slash = strrchr(path, '/');
    if (slash == NULL) {
        strcpy(dir, ".");
        *name = path;
        return;
    }
    size_t len = slash == path ? 1 : (size_t)(slash - path);
    memcpy(dir, path, len);
    dir[len] = '\0';
    *name = slash + 1;
}

static int same_inode(const char *a, const char *b) {
    struct stat sa, sb;
    return stat(a, &sa) == 0 && stat(b, &sb) == 0 && sa.st_dev == sb.st_dev &&
           sa.st_ino == sb.st_ino;
}

/* Whether `rel` (from this process's working directory) names what `given` names: the same
 * file, or for one that does not exist yet (an output), the same name in the same directory. */
static int same_file(const char *given, const char *rel) {
    struct stat sg, sr;
    if (stat(given, &sg) == 0)
        return stat(rel, &sr) == 0 && sg.st_dev == sr.st_dev && sg.st_ino == sr.st_ino;
    if (errno != ENOENT || strlen(given) >= PATH_MAX)
        return 0;
    char dir_given[PATH_MAX], dir_rel[PATH_MAX];
    const char *name_given, *name_rel;
    split(given, dir_given, &name_given);
    split(rel, dir_rel, &name_rel);
    if (strcmp(name_given, name_rel) != 0 || !*name_given || !strcmp(name_given, ".") ||
        !strcmp(name_given, ".."))
        return 0;
    return same_inode(dir_given, dir_rel);
}

/* ---- the base directory ---------------------------------------------------------------- */

struct base {
    int known;            /* worked out (or found to be none) */
    int set;              /* there is one: rewrite under it */
    char given[PATH_MAX]; /* as named (normalized): build tools name paths through symlinks */
    char real[PATH_MAX];  /* with symlinks resolved: what getcwd() and realpath() see */
    char cwd[PATH_MAX];   /* the working directory (getcwd: symlinks resolved) */
};

/* Sets b->given and b->real from an absolute directory `dir`; 0 if it is not one. */
static int set_base(struct base *b, const char *dir) {
    char resolved[PATH_MAX];
    if (dir[0] != '/' || !normalize(dir, b->given) || realpath(dir, resolved) == NULL ||
        !normalize(resolved, b->real))
        return 0;
    b->set = strcmp(b->real, "/") != 0 && strcmp(b->given, "/") != 0;
    return 1;
}

/* The CMake source directory a CMakeCache.txt records (CMAKE_HOME_DIRECTORY), into `out`. */
static int cmake_home(const char *cache, char *out) {
    int fd = open(cache, O_RDONLY | O_CLOEXEC | O_NONBLOCK);
    if (fd < 0)
        return 0;
    struct stat st;
    char *text = NULL;
    int found = 0;
    if (fstat(fd, &st) == 0 && S_ISREG(st.st_mode) && st.st_size < MAX_CACHE_FILE &&
        (text = malloc((size_t)st.st_size + 1)) != NULL) {
        size_t got = 0;
        ssize_t r;
        while (got < (size_t)st.st_size &&
               (r = read(fd, text + got, (size_t)st.st_size - got)) > 0)
            got += (size_t)r;
        text[got] = '\0';
        static const char key[] = "CMAKE_HOME_DIRECTORY:INTERNAL=";
        char *line = text;
        while (line != NULL && strncmp(line, key, sizeof key - 1) != 0) {
            line = strchr(line, '\n');
            line = line != NULL ? line + 1 : NULL;
        }
        if (line != NULL) {
            char *value = line + sizeof key - 1;
            size_t len = strcspn(value, "\r\n");
            if (len > 0 && len < PATH_MAX && value[0] == '/') {
                memcpy(out, value, len);
                out[len] = '\0';
                found = 1;
            }
        }
    }
    free(text);
    close(fd);
    return found;
}

/* Replaces `dir` (normalized) by its parent; 0 at the root. */
static int up(char *dir) {
    if (strcmp(dir, "/") == 0)
        return 0;
    char *slash = strrchr(dir, '/');
    if (slash == dir)
        slash[1] = '\0';
    else
        *slash = '\0';
    return 1;
}

static int holds(const char *dir, const char *name, char *buf) {
    struct stat st;
    if ((size_t)snprintf(buf, PATH_MAX, "%s/%s", strcmp(dir, "/") ? dir : "", name) >= PATH_MAX)
        return 0;
    return lstat(buf, &st) == 0;
}

/* The checkout's top directory, when neither --base-dir nor the environment names one. */
static void find_base(struct base *b) {
    char dir[PATH_MAX], buf[PATH_MAX], home[PATH_MAX];
    int in_cmake = 0;
    strcpy(dir, b->cwd);
    do {
        if (holds(dir, "CMakeCache.txt", buf) && cmake_home(buf, home) && normalize(home, dir)) {
            strcpy(home, dir);
            in_cmake = 1;
            break;
        }
    } while (up(dir));
    strcpy(dir, in_cmake ? home : b->cwd);
    do {
        if (holds(dir, ".git", buf) && strcmp(dir, "/") != 0) {
            set_base(b, dir);
            return;
        }
    } while (up(dir));
    set_base(b, in_cmake ? home : b->cwd);
}

/* Makes sure the base directory is worked out; returns whether there is one. `explicit`:
 * the one --base-dir or the environment named, NULL to look for the checkout's top. */
static int need_base(struct base *b, const char *explicit) {
    if (b->known)
        return b->set;
    b->known = 1;
    if (getcwd(b->cwd, sizeof b->cwd) == NULL || b->cwd[0] != '/')
        return 0; /* no working directory to be relative to: nothing is rewritten */
    if (explicit != NULL)
        set_base(b, explicit); /* checked in main() */
    else
        find_base(b);
    return b->set;
}

/* `path` rewritten relative to the working directory when it is an absolute path under the
 * base directory and the relative path names the same file; NULL to leave it as it is. */
static char *rewrite(struct base *b, const char *explicit, const char *path) {
    char norm[PATH_MAX], target[PATH_MAX], rel[PATH_MAX];
    if (path[0] != '/' || !need_base(b, explicit) || !normalize(path, norm))
        return NULL;
    if (under(norm, b->real)) {
        strcpy(target, norm);
    } else if (under(norm, b->given)) { /* named through a symlink: the same place, resolved */
        size_t len = strlen(b->given);
        if (strlen(b->real) + strlen(norm + len) >= PATH_MAX)
            return NULL;
        strcpy(stpcpy(target, b->real), norm + len);
    } else {
        /* named through a symlink the base directory is not named by (/home -> /data/home) */
        char resolved[PATH_MAX];
        if (realpath(path, resolved) == NULL || !normalize(resolved, target) ||
            !under(target, b->real))
            return NULL;
    }
    if (!relative(target, b->cwd, rel) || !same_file(path, rel))
        return NULL;
    return strdup(rel);
}

/* ---- arguments ------------------------------------------------------------------------- */

/* Options whose value (joined, or the next argument) is a path clang reads or writes. */
static const char *const PATH_OPTIONS[] = {"-I", "-isystem", "-iquote", "-idirafter", "-include",
                                           "-imacros", "-o", "-MF", NULL};
/* Options whose "=" value is a file clang reads while compiling. */
static const char *const PATH_EQUALS[] = {
    "-fprofile-use=", "-fprofile-instr-use=", "-fprofile-sample-use=", "-fprofile-list=",
    "-fprofile-remapping-file=", "-fsanitize-ignorelist=", "-fsanitize-blacklist=", NULL};
/* Options with a separate value that is left alone, whatever it is (not a positional). */
static const char *const OTHER_VALUED[] = {
    "-MT", "-MQ", "-MJ", "-Xclang", "-Xlinker", "-Xpreprocessor", "-Xassembler", "-Xanalyzer",
    "-Xarch_host", "-Xarch_device", "-Xcuda-fatbinary", "-Xcuda-ptxas", "-Xopenmp-target",
    "-mllvm", "-target", "-arch", "-x", "-D", "-U", "-A", "-u", "-z", "-e", "-T", "-l", "-L",
    "-F", "-B", "--param", "-isysroot", "--sysroot", "-iprefix", "-iwithprefix",
    "-iwithprefixbefore", "-imultilib", "-include-pch", "-dependency-file", "-dependency-dot",
    "-serialize-diagnostics", "-aux-info", "-dumpbase", "-dumpdir", "-working-directory",
    "--target", "--config", NULL};

static int listed(const char *const *list, const char *word) {
    for (; *list; list++)
        if (strcmp(*list, word) == 0)
            return 1;
    return 0;
}

/* The option of PATH_OPTIONS `word` starts with, its path joined to it ("-I/x"). */
static const char *joined_path(const char *word) {
    for (const char *const *o = PATH_OPTIONS; *o; o++) {
        size_t len = strlen(*o);
        if (strncmp(word, *o, len) == 0 && word[len] == '/')
            return word + len;
    }
    for (const char *const *o = PATH_EQUALS; *o; o++) {
        size_t len = strlen(*o);
        if (strncmp(word, *o, len) == 0)
            return word + len;
    }
    return NULL;
}

static int is_launcher(const char *word) {
    const char *name = strrchr(word, '/');
    name = name ? name + 1 : word;
    return !strcmp(name, "ccache") || !strcmp(name, "sccache") || !strcmp(name, "distcc");
}

static void print_quoted(const char *word) {
    if (*word && strspn(word, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789"
                              "@%+=:,./-_") == strlen(word)) {
        fputs(word, stdout);
        return;
    }
    putchar('\'');
    for (; *word; word++) {
        if (*word == '\'')
            fputs("'\"'\"'", stdout);
        else
            putchar(*word);
    }
    putchar('\'');
}

int main(int argc, char **argv) {
    const char *explicit = NULL, *map_to = NULL;
    int print = 0, i = 1;
    for (; i < argc && strncmp(argv[i], "--", 2) == 0; i++) {
        const char *a = argv[i];
        if (strcmp(a, "--") == 0) {
            i++;
            break;
        } else if (strncmp(a, "--base-dir=", 11) == 0) {
            explicit = a + 11;
        } else if (strcmp(a, "--base-dir") == 0) {
            if (++i >= argc)
                return usage_error("option --base-dir needs a value (DIR)", NULL);
            explicit = argv[i];
        } else if (strcmp(a, "--prefix-map") == 0) {
            map_to = ".";
        } else if (strncmp(a, "--prefix-map=", 13) == 0) {
            map_to = a + 13;
            if (!*map_to)
                return usage_error("option --prefix-map= needs a NAME", NULL);
        } else if (strcmp(a, "--print") == 0) {
            print = 1;
        } else if (strcmp(a, "--help") == 0) {
            puts(USAGE "\n\nRewrites absolute paths under the base directory (--base-dir, "
                 "$CACHED_DIST_BASE_DIR, else the\ncheckout's top directory) relative to the "
                 "working directory, then runs COMPILER.\nSee `cached-dist flags --launcher` and "
                 "docs/guide.md (\"Sharing a cache\").");
            return 0;
        } else {
            return usage_error("unknown option", a);
        }
    }
    if (i >= argc)
        return usage_error("missing COMPILER", NULL);
    if (explicit == NULL) {
        explicit = getenv("CACHED_DIST_BASE_DIR");
        if (explicit != NULL && !*explicit) {
            fprintf(stderr, NAME ": error: CACHED_DIST_BASE_DIR is empty: unset it, or name "
                            "a directory\n");
            return 2;
        }
    }
    if (explicit != NULL) {
        struct stat st;
        if (explicit[0] != '/') {
            fprintf(stderr, NAME ": error: the base directory must be an absolute path, not "
                            "'%s'\n", explicit);
            return 2;
        }
        if (stat(explicit, &st) != 0 || !S_ISDIR(st.st_mode)) {
            fprintf(stderr, NAME ": error: base directory %s: %s\n", explicit,
                    access(explicit, F_OK) == 0 ? "not a directory" : strerror(errno));
            return 2;
        }
    }

    char **args = argv + i; /* COMPILER [ARGS...] */
    int n = argc - i, compiles = 0, elsewhere = 0;
    for (int k = 1; k < n; k++) {
        if (!strcmp(args[k], "-c") || !strcmp(args[k], "-S") || !strcmp(args[k], "-E"))
            compiles = 1;
        if (!strncmp(args[k], "-working-directory", 18))
            elsewhere = 1; /* relative paths would be taken from another directory */
    }
    char **out = malloc(sizeof *out * (size_t)(n + 3));
    struct base *b = calloc(1, sizeof *b);
    if (out == NULL || b == NULL) {
        fprintf(stderr, NAME ": error: out of memory\n");
        return 2;
    }
    int m = 0, first = is_launcher(args[0]) && n > 1 ? 2 : 1, options_end = 0;
    for (int k = 0; k < first; k++)
        out[m++] = args[k]; /* the compiler (after ccache: both words) is left alone */
    for (int k = first; k < n; k++) {
        const char *a = args[k];
        char *done = NULL;
        if (elsewhere) {
            /* nothing is rewritten */
        } else if (options_end || a[0] != '-') {
            if (strcmp(a, "-") != 0)
                done = rewrite(b, explicit, a); /* a source (or a link's input) */
        } else if (strcmp(a, "--") == 0) {
            options_end = 1;
        } else if (listed(PATH_OPTIONS, a) && k + 1 < n) {
            out[m++] = args[k++];
            a = args[k];
            done = rewrite(b, explicit, a);
        } else if (listed(OTHER_VALUED, a) && k + 1 < n) {
            out[m++] = args[k++];
            a = args[k];
        } else {
            const char *path = joined_path(a);
            char *rel = path ? rewrite(b, explicit, path) : NULL;
            if (rel != NULL) {
                size_t head = (size_t)(path - a);
                done = malloc(head + strlen(rel) + 1);
                if (done != NULL) {
                    memcpy(done, a, head);
                    strcpy(done + head, rel);
                }
                free(rel);
            }
        }
        out[m++] = done != NULL ? done : (char *)a;
    }
    if (map_to != NULL && compiles && need_base(b, explicit)) {
        const char *bases[2] = {b->given, b->real};
        for (int k = 0; k < (strcmp(b->given, b->real) ? 2 : 1); k++) {
            if (strchr(bases[k], '=') != NULL) {
                fprintf(stderr, NAME ": error: --prefix-map: the base directory %s holds '=', "
                                "which -ffile-prefix-map cannot map\n", bases[k]);
                return 2;
            }
            size_t len = strlen(bases[k]) + strlen(map_to) + 20;
            char *flag = malloc(len);
            if (flag == NULL)
                return 2;
            snprintf(flag, len, "-ffile-prefix-map=%s=%s", bases[k], map_to);
            out[m++] = flag;
        }
    }
    out[m] = NULL;
    if (print) {
        for (int k = 0; k < m; k++) {
            if (k)
                putchar(' ');
            print_quoted(out[k]);
        }
        putchar('\n');
        return fflush(stdout) == 0 ? 0 : 1;
    }
    execvp(out[0], out);
    int saved = errno;
    fprintf(stderr, NAME ": error: cannot run %s: %s\n", out[0], strerror(saved));
    return saved == ENOENT ? 127 : 126;
}
