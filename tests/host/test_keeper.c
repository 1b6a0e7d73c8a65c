/*
 * The process keeper (host/keeper.c), with real processes: a "runner"
 * process starts a keeper and a process group (a leader and a grandchild,
 * as `sh -c 'sleep & wait'` makes), tells the keeper, and dies by SIGKILL.
 * The test process is a child subreaper, so everything orphaned comes to
 * it: it reaps the zombies and sees whether the group is empty.
 */
#define _GNU_SOURCE
#include <criterion/criterion.h>

#include "host/keeper.h"

#include <errno.h>
#include <signal.h>
#include <stdint.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

enum { WATCH, FORGET, HOLD_PIPE, STOP };

typedef struct report {
    pid_t group, keeper, holder;
} report;

static void nap_ms(int ms)
{
    struct timespec ts = {0, ms * 1000000L};
    nanosleep(&ts, NULL);
}

/*
 * A group leader with a grandchild, both ignoring SIGTERM, run as
 * wq.exec runs programs: exec'd, so the pipe's write end (close-on-exec)
 * is not theirs.
 */
static pid_t start_group(void)
{
    pid_t leader = fork();
    if (leader == 0) {
        setpgid(0, 0);
        execlp("sh", "sh", "-c", "trap '' TERM; sleep 1000 & wait", (char *)NULL);
        _exit(127);
    }
    setpgid(leader, leader);
    return leader;
}

/* The runner's life: keeper, group, the message of mode, a report, then death. */
static void runner(int out, int mode)
{
    int err;
    wq_keeper *k = wq_keeper_start(&err);
    if (!k)
        _exit(2);
    report r = {start_group(), wq_keeper_pid(k), 0};
    nap_ms(20); /* the grandchild is in the group */
    if (wq_keeper_watch(k, r.group) < 0)
        _exit(3);
    if (mode == FORGET && wq_keeper_forget(k, r.group) < 0)
        _exit(4);
    if (mode == HOLD_PIPE) {
        r.holder = fork(); /* holds the pipe's write end: no end of file */
        if (r.holder == 0)
            for (;;)
                pause();
    }
    if (write(out, &r, sizeof r) != (ssize_t)sizeof r)
        _exit(5);
    if (mode == STOP) {
        wq_keeper_stop(k); /* waits for the keeper */
        _exit(0);
    }
    raise(SIGKILL);
}

/* Runs a runner in mode; returns its report once it has ended. */
static report run(int mode)
{
    cr_assert_eq(prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0), 0);
    int p[2];
    cr_assert_eq(pipe(p), 0);
    pid_t pid = fork();
    if (pid == 0) {
        close(p[0]);
        runner(p[1], mode);
    }
    close(p[1]);
    report r;
    cr_assert_eq(read(p[0], &r, sizeof r), (ssize_t)sizeof r, "the runner reported");
    close(p[0]);
    int st;
    cr_assert_eq(waitpid(pid, &st, 0), pid);
    if (mode == STOP)
        cr_assert(WIFEXITED(st) && WEXITSTATUS(st) == 0, "status %d", st);
    else
        cr_assert(WIFSIGNALED(st) && WTERMSIG(st) == SIGKILL, "status %d", st);
    return r;
}

/* Whether pid (a group with -pid) has no process left within ms; reaps what comes to us. */
static int gone_within_ms(pid_t pid, int ms)
{
    for (int i = 0;; i++, nap_ms(1)) {
        while (waitpid(-1, NULL, WNOHANG) > 0)
            ;
        if (kill(pid, 0) < 0 && errno == ESRCH)
            return 1;
        if (i >= ms)
            return 0;
    }
}

/* Whether group g emptied within ms; if not, kills it (the test fails, leaving nothing). */
static int group_gone_within_ms(pid_t g, int ms)
{
    if (gone_within_ms(-g, ms))
        return 1;
    kill(-g, SIGKILL);
    gone_within_ms(-g, 1000);
    return 0;
}

Test(keeper, kills_a_watched_group_with_its_grandchild_when_the_runner_is_killed)
{
    report r = run(WATCH);
    cr_assert(group_gone_within_ms(r.group, 1000),
              "group %d still has processes 1 s after the runner's SIGKILL", (int)r.group);
    cr_assert(gone_within_ms(r.keeper, 1000), "the keeper %d ended", (int)r.keeper);
}

Test(keeper, leaves_a_forgotten_group_alone)
{
    report r = run(FORGET);
    cr_assert(!group_gone_within_ms(r.group, 200), "a group the runner had forgotten was killed");
}

Test(keeper, kills_the_groups_when_the_runner_dies_while_another_process_holds_the_pipe)
{
    report r = run(HOLD_PIPE);
    int gone = group_gone_within_ms(r.group, 1500);
    kill(r.holder, SIGKILL);
    waitpid(r.holder, NULL, 0);
    cr_assert(gone, "the keeper did not notice its runner's death without end of file");
}

Test(keeper, a_stop_kills_the_groups_it_still_knows_and_waits_for_the_keeper)
{
    report r = run(STOP);
    /* wq_keeper_stop reaped the keeper: it is not even a zombie for us to find. */
    cr_assert(kill(r.keeper, 0) < 0 && errno == ESRCH, "the stop waited for the keeper");
    cr_assert(group_gone_within_ms(r.group, 1000), "group %d outlived the keeper's stop",
              (int)r.group);
}
