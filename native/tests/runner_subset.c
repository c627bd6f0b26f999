/* runner_subset.c — the check of cuda_subset.h against cuda.h
 * (tests/cuda_subset/) finds what it is meant to find: each case changes
 * one declaration in a copy of the subset's headers, and the check must then
 * fail, naming it, in the header that holds it; the copy left alone must
 * pass.  Included by runner.c where the check is built (CMake defines
 * CUDA_SUBSET_CHECKGEN and the paths below only where cuda.h is). */
#ifdef CUDA_SUBSET_CHECKGEN

struct subset_case {
    const char *name;
    const char *file;       /* the header changed: "cuda_subset.h" or "cuda_subset_types.h" */
    const char *from, *to;  /* its text replaced (once); NULL: unchanged */
    const char *expect;     /* in the compiler's messages, after "<file>:" */
};

static const struct subset_case subset_cases[] = {
    {"cuda_subset check: the headers as they are pass", NULL, NULL, NULL, NULL},
    {"cuda_subset check: an enumerator's value", "cuda_subset_types.h", "CUDA_ERROR_NOT_FOUND = 500,",
     "CUDA_ERROR_NOT_FOUND = 501,", "CUDA_ERROR_NOT_FOUND: value differs from cuda.h"},
    {"cuda_subset check: a member's type of the same size", "cuda_subset_types.h", "    int id;",
     "    unsigned int id;", "struct CUmemLocation_st.id: type differs from cuda.h"},
    {"cuda_subset check: two members swapped", "cuda_subset_types.h",
     "    size_t Width;\n    size_t Height;\n    CUarray_format", "    size_t Height;\n    size_t Width;\n    CUarray_format",
     "struct CUDA_ARRAY_DESCRIPTOR_st.Width: offset differs from cuda.h"},
    {"cuda_subset check: a member of a nested struct", "cuda_subset_types.h", "        unsigned short usage;",
     "        unsigned int usage;", "struct CUmemAllocationProp_st.allocFlags.usage: size differs from cuda.h"},
    {"cuda_subset check: an array's length", "cuda_subset_types.h", "reserved[54]", "reserved[52]",
     "struct CUmemPoolProps_st.reserved: size differs from cuda.h"},
    {"cuda_subset check: a member left out", "cuda_subset_types.h", "    unsigned int numAttrs;\n", "",
     "struct CUlaunchConfig_st: size differs from cuda.h"},
    {"cuda_subset check: a member renamed", "cuda_subset_types.h", "CUgraphInstantiateResult result_out;",
     "CUgraphInstantiateResult result;", "no member named 'result'"},
    {"cuda_subset check: a prototype's parameter", "cuda_subset.h",
     "CUresult cuMemGetInfo_v2(size_t *free, size_t *total);",
     "CUresult cuMemGetInfo_v2(unsigned int *free, size_t *total);", "conflicting types for 'cuMemGetInfo_v2'"},
    {"cuda_subset check: a function by the name cuda.h renames", "cuda_subset.h",
     "CUresult cuMemGetInfo_v2(size_t *free, size_t *total);", "CUresult cuMemGetInfo(size_t *free, size_t *total);",
     "cuda.h renames cuMemGetInfo"},
    {"cuda_subset check: a function cuda.h lacks", "cuda_subset.h", "CUresult cuInit(unsigned int Flags);",
     "CUresult cuInit(unsigned int Flags);\nCUresult cuMemAllocEverything(CUdeviceptr *dptr);",
     "'cuMemAllocEverything' undeclared"},
    {"cuda_subset check: a rename", "cuda_subset.h", "#define cuMemGetInfo                        cuMemGetInfo_v2",
     "#define cuMemGetInfo                        cuMemGetInfo_v3", "\"cuMemGetInfo\" redefined"},
    {"cuda_subset check: a macro's value", "cuda_subset.h", "((CUstream)0x2)", "((CUstream)0x3)",
     "\"CU_STREAM_PER_THREAD\" redefined"},
    {"cuda_subset check: a macro cuda.h lacks", "cuda_subset.h", "#define CU_STREAM_LEGACY",
     "#define CU_STREAM_NOWHERE ((CUstream)0x7)\n#define CU_STREAM_LEGACY", "cuda.h defines no macro CU_STREAM_NOWHERE"},
    {"cuda_subset check: a scalar typedef", "cuda_subset.h", "typedef int CUdevice_v1;",
     "typedef unsigned int CUdevice_v1;", "conflicting types for 'CUdevice_v1'"},
    {"cuda_subset check: a handle's struct tag", "cuda_subset.h", "typedef struct CUctx_st *CUcontext;",
     "typedef struct CUcontext_st *CUcontext;", "conflicting types for 'CUcontext'"},
    {"cuda_subset check: a typedef cuda.h lacks", "cuda_subset.h", "typedef CUdevice_v1 CUdevice;",
     "typedef CUdevice_v1 CUdevice;\ntypedef CUdevice CUdeviceOrdinal;", "'CUdeviceOrdinal' undeclared"},
};

/* path's text, with from replaced by to; NULL when from is not there. */
static char *subset_text(const char *path, const char *from, const char *to)
{
    static char text[1 << 20];
    int fd = open(path, O_RDONLY);
    if (fd < 0) return NULL;
    ssize_t n = read(fd, text, sizeof text - 1);
    close(fd);
    if (n <= 0 || (size_t)n == sizeof text - 1) return NULL;
    text[n] = '\0';
    if (from == NULL) return strdup(text);
    const char *at = strstr(text, from);
    if (at == NULL) return NULL;
    size_t head = (size_t)(at - text), total = (size_t)n - strlen(from) + strlen(to) + 1;
    char *out = malloc(total);
    if (out == NULL) return NULL;
    snprintf(out, total, "%.*s%s%s", (int)head, text, to, at + strlen(from));
    return out;
}

static int subset_write(const char *file, const struct subset_case *c)
{
    char src[512], dst[512];
    snprintf(src, sizeof src, "%s/%s", CUDA_SUBSET_DIR, file);
    snprintf(dst, sizeof dst, "%s/%s", dir, file);
    int changed = c->file != NULL && strcmp(c->file, file) == 0;
    char *text = subset_text(src, changed ? c->from : NULL, changed ? c->to : NULL);
    if (text == NULL) return h_fail("%s: cannot read it, or no \"%s\" in it", src, changed ? c->from : "");
    int fd = open(dst, O_WRONLY | O_CREAT | O_TRUNC, 0644);
    size_t len = strlen(text);
    int ok = fd >= 0 && write(fd, text, len) == (ssize_t)len;
    if (fd >= 0) close(fd);
    free(text);
    return ok ? 0 : h_fail("cannot write %s", dst);
}

/* Run argv with its messages in err_text; its exit status, -1 if it did not run. */
static int subset_exec(const char *const *argv)
{
    char errs[320];
    snprintf(errs, sizeof errs, "%s/messages", dir);
    pid_t pid = fork();
    if (pid == 0) {
        int fd = open(errs, O_WRONLY | O_CREAT | O_TRUNC, 0644);
        dup2(fd, 1);
        dup2(fd, 2);
        const char *env[] = {"LC_ALL=C", "PATH=/usr/bin:/bin", NULL};
        execve(argv[0], (char *const *)argv, (char *const *)env);
        _exit(127);
    }
    int st;
    if (pid < 0 || waitpid(pid, &st, 0) != pid) return -1;
    slurp(errs, err_text, sizeof err_text);
    return WIFEXITED(st) ? WEXITSTATUS(st) : -1;
}

/* A line of err_text points into file ("<dir>/<file>:LINE:") and says expect. */
static int subset_said(const char *file, const char *expect)
{
    char where[64];
    snprintf(where, sizeof where, "/%s:", file);
    for (const char *line = err_text; *line != '\0';) {
        const char *end = strchr(line, '\n');
        size_t len = end != NULL ? (size_t)(end - line) : strlen(line);
        char one[1024];
        snprintf(one, sizeof one, "%.*s", (int)len, line);
        if (strstr(one, where) != NULL && strstr(one, expect) != NULL) return 1;
        line += len + (end != NULL);
    }
    return 0;
}

static int t_subset_check(const void *arg)
{
    const struct subset_case *c = arg;
    if (subset_write("cuda_subset.h", c) || subset_write("cuda_subset_types.h", c)) return 1;
    char subset[320], types[320], check[320], include[330];
    snprintf(subset, sizeof subset, "%s/cuda_subset.h", dir);
    snprintf(types, sizeof types, "%s/cuda_subset_types.h", dir);
    snprintf(check, sizeof check, "%s/check.c", dir);
    snprintf(include, sizeof include, "-I%s", dir);
    const char *gen[] = {CUDA_SUBSET_CHECKGEN, subset, types, check, NULL};
    int st = subset_exec(gen);
    H_CHECK(st == 0, "cuda-subset-checkgen exited with %d: %s", st, err_text);
    const char *cc[] = {CUDA_SUBSET_CC, "-std=gnu11", "-fsyntax-only", "-Wall",  "-Wextra", "-Werror",
                        include,        "-isystem",   CUDA_INCLUDE_DIR, check, NULL};
    st = subset_exec(cc);
    if (c->file == NULL) {
        H_CHECK(st == 0, "the check failed on the headers as they are (%d): %s", st, err_text);
        return 0;
    }
    H_CHECK(st > 0, "the check passed (status %d) with \"%s\" for \"%s\" in %s", st, c->to, c->from, c->file);
    H_CHECK(subset_said(c->file, c->expect), "the check failed without \"%s\" in %s: %s", c->expect, c->file,
            err_text);
    return 0;
}

static void add_subset_tests(struct t *tests, int *n)
{
    for (size_t i = 0; i < sizeof subset_cases / sizeof subset_cases[0]; i++)
        tests[(*n)++] = (struct t){subset_cases[i].name, t_subset_check, &subset_cases[i]};
}

#else
static void add_subset_tests(struct t *tests, int *n)
{
    (void)tests;
    (void)n;
}
#endif
