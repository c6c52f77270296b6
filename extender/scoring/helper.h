/* A second thread for kernel.c's pass over the nodes (included by pass.h only).

Why: a new pod shape on a fleet whose nodes all differ is placed on every node, about
145 ns a node: 0.72 ms of the filter at 5,000 nodes, the one case still above issue 28's
latency floor (docs/BENCHMARKS.md). The extender is given two CPUs (manifests/base) and
the filter holds one of them, so the pass is shared with one helper thread, started when
the extender is built (kernel.share) or on first use, and then kept: it sleeps between
passes.

How the work is split: the caller and the helper take chunks of rows, one from each
end, until they meet (pass.h's score_chunks: which end by the CPU each runs on, so
each CPU's cache keeps the rows it read in the last pass). A helper that wakes late
(30-100 us here), or never gets a CPU, costs nothing but its wake-up: the caller takes
the chunks it did not. Once the helper has taken a chunk the caller waits for it to
finish it (128 rows, ~20 us), or longer if the helper is preempted then. Nothing is
split between the two but rows, each written by the one that took it, so the answers
are the same bits whichever thread computed them (tests/test_kernel_helper.py). Before
it posts a pass the caller keeps the helper off its own CPU (affinity, set again only
when the caller has moved): woken on the caller's CPU, the helper waited for it.

One helper for the process: a second pass that finds it busy runs alone. After a fork
the child has no helper thread, so its state is reset there and the child starts its
own on first use. With one CPU to run on (sched_getaffinity) or a CPU limit under two
(a container's cgroup quota) no helper is started. */

#include <pthread.h>
#include <sched.h>
#include <signal.h>
#include <stdio.h>

typedef void (*Job)(void *arg, int who); /* who: 0 the caller, 1 the helper */

enum { IDLE, POSTED, TAKEN, DONE };

static struct {
    pthread_mutex_t lock;  /* guards everything below */
    pthread_cond_t wake;   /* a job was posted */
    pthread_cond_t done;   /* the helper finished the job it took */
    pthread_mutex_t owner; /* held by the one pass using the helper */
    int state, started;    /* started: 0 not yet, 1 running, -1 never (one CPU, failure) */
    int enabled; /* kernel.share(): HEADROOM_SCORING_HELPER, tests; read with __atomic */
    pthread_t thread;
    cpu_set_t allowed;     /* the CPUs the process may run on, when the helper started */
    int last_cpu;          /* the CPU the helper was kept off for the last pass */
    Job job;
    void *arg;
} helper = {.lock = PTHREAD_MUTEX_INITIALIZER,
            .wake = PTHREAD_COND_INITIALIZER,
            .done = PTHREAD_COND_INITIALIZER,
            .owner = PTHREAD_MUTEX_INITIALIZER,
            .state = IDLE,
            .enabled = 1,
            .last_cpu = -1};

static void *helper_main(void *unused) {
    (void)unused;
    pthread_mutex_lock(&helper.lock);
    for (;;) {
        while (helper.state != POSTED) pthread_cond_wait(&helper.wake, &helper.lock);
        helper.state = TAKEN;
        Job job = helper.job;
        void *arg = helper.arg;
        pthread_mutex_unlock(&helper.lock);
        job(arg, 1);
        pthread_mutex_lock(&helper.lock);
        helper.state = DONE;
        pthread_cond_signal(&helper.done);
    }
    return NULL;
}

/* In a forked child: no helper thread, and the locks as a thread of the parent left them. */
static void helper_forked(void) {
    pthread_mutex_t unlocked = PTHREAD_MUTEX_INITIALIZER;
    pthread_cond_t fresh = PTHREAD_COND_INITIALIZER;
    helper.lock = helper.owner = unlocked;
    helper.wake = helper.done = fresh;
    helper.state = IDLE;
    helper.started = 0;
    helper.last_cpu = -1;
}

/* The first number in a file; -1 when it cannot be read ("max" included). */
static long long number_in(const char *path) {
    long long value = -1;
    FILE *f = fopen(path, "r");
    if (!f) return -1;
    if (fscanf(f, "%lld", &value) != 1) value = -1;
    fclose(f);
    return value;
}

/* The CPUs' worth of time a cgroup CPU limit gives the process (a container's
   limits.cpu): cgroup v2's cpu.max ("quota period", or "max period" for none), else
   v1's CFS quota (-1 for none); 0 when there is none. */
static double cpu_limit(void) {
    long long quota, period = 0;
    FILE *f = fopen("/sys/fs/cgroup/cpu.max", "r");
    if (f) {
        if (fscanf(f, "%lld %lld", &quota, &period) != 2) quota = -1; /* "max": none */
        fclose(f);
    } else {
        quota = number_in("/sys/fs/cgroup/cpu/cpu.cfs_quota_us");
        period = number_in("/sys/fs/cgroup/cpu/cpu.cfs_period_us");
    }
    return quota > 0 && period > 0 ? (double)quota / (double)period : 0;
}

/* The helper, started with every signal blocked (they go to the interpreter's threads,
   never to this one); 0 on success. */
static int helper_start(void) {
    pthread_attr_t attr;
    sigset_t all, was;
    int failed;
    if (pthread_attr_init(&attr) != 0) return -1;
    pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
    pthread_attr_setstacksize(&attr, 256 * 1024); /* two node scratch blocks at most */
    sigfillset(&all);
    pthread_sigmask(SIG_BLOCK, &all, &was); /* the new thread inherits this mask */
    failed = pthread_create(&helper.thread, &attr, helper_main, NULL);
    pthread_sigmask(SIG_SETMASK, &was, NULL);
    pthread_attr_destroy(&attr);
    return failed;
}

/* Called with helper.owner held: whether a helper thread runs (starting it if need be:
   not with one CPU to run on, by affinity or by a CPU limit under two). */
static int helper_ready(void) {
    static int registered;
    if (helper.started != 0) return helper.started == 1;
    helper.started = -1;
    if (sched_getaffinity(0, sizeof helper.allowed, &helper.allowed) != 0 ||
        CPU_COUNT(&helper.allowed) < 2)
        return 0;
    double limit = cpu_limit();
    if (limit > 0 && limit < 2) return 0;
    if (!registered && pthread_atfork(NULL, NULL, helper_forked) != 0) return 0;
    registered = 1;
    if (helper_start() == 0) helper.started = 1;
    return helper.started == 1;
}

/* Whether a helper thread runs in this process. */
static int helper_running(void) {
    return helper.started == 1;
}

/* Called with helper.owner held: the helper off the caller's CPU, so that woken by the
   caller it is not queued behind it (set again only when the caller has moved). */
static void keep_off_caller(void) {
    int cpu = sched_getcpu();
    if (cpu < 0 || cpu == helper.last_cpu || !CPU_ISSET(cpu, &helper.allowed)) return;
    cpu_set_t others = helper.allowed;
    CPU_CLR(cpu, &others);
    pthread_setaffinity_np(helper.thread, sizeof others, &others);
    helper.last_cpu = cpu;
}

/* job(arg, 0) here and, when the helper is free, job(arg, 1) on it at the same time;
   returns when both have returned. The job must take its work in shares (either thread
   may do all of it). Called without the interpreter lock. */
static void run_shared(Job job, void *arg) {
    int mine = __atomic_load_n(&helper.enabled, __ATOMIC_RELAXED) &&
               pthread_mutex_trylock(&helper.owner) == 0;
    if (mine && !helper_ready()) {
        pthread_mutex_unlock(&helper.owner);
        mine = 0;
    }
    if (!mine) {
        job(arg, 0);
        return;
    }
    keep_off_caller();
    pthread_mutex_lock(&helper.lock);
    helper.job = job;
    helper.arg = arg;
    helper.state = POSTED;
    pthread_cond_signal(&helper.wake);
    pthread_mutex_unlock(&helper.lock);
    job(arg, 0);
    pthread_mutex_lock(&helper.lock);
    if (helper.state == POSTED) /* not woken yet: the caller did it all, take it back */
        helper.state = IDLE;
    while (helper.state == TAKEN) pthread_cond_wait(&helper.done, &helper.lock);
    helper.state = IDLE;
    pthread_mutex_unlock(&helper.lock);
    pthread_mutex_unlock(&helper.owner);
}
